-- reads: events, steps, threads
-- makes: _cp_prefix_annotations(run_id, rank, event_id, name, ts_us, end_us, nested)
-- makes: cp_nested_windows(nested_count)
-- makes: cp_windows(run_id, rank, step, name, start_us, end_us, extends_to_device_end)
-- makes: _cp_lanes(run_id, rank, pid, tid, role)
-- makes: cp_ops(run_id, rank, event_id, name, cat, pid, tid, ts_us, end_us, correlation, role,
--               is_python, is_top, top_event_id)
-- makes: cp_gpu_ops(run_id, rank, event_id, name, cat, stream, ts_us, end_us, correlation,
--                   launch_event_id, launch_start_us, launch_end_us, launch_enqueued_us,
--                   top_event_id, launch_tid, has_traced_launch)
-- makes: cp_annotations(run_id, rank, name, ts_us, end_us)
-- makes: cp_comm_ops(run_id, rank, event_id, name, cat, pid, tid, ts_us, end_us)
-- param: window_prefix VARCHAR
-- param: run_id INTEGER
-- Stage 1: analysis windows and the CPU events of the logical thread (main + autograd).

-- One window per ProfilerStep (steps partition the timeline: see sql/ingest/steps.sql), or
-- per outermost annotation starting with $window_prefix (one nested in another of the same
-- prefix on its thread is not a window of its own: cp_nested_windows counts them for a warning).
CREATE OR REPLACE TEMP TABLE _cp_prefix_annotations AS
SELECT run_id, rank, event_id, name, ts_us, end_us,
       ts_us < coalesce(max(end_us) OVER (
           PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, end_us DESC, event_id
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), '-infinity'::DOUBLE) AS nested
FROM events
WHERE $window_prefix IS NOT NULL AND ($run_id IS NULL OR run_id = $run_id)
  AND ph = 'X' AND starts_with(name, $window_prefix) AND NOT is_device_category(cat);

CREATE OR REPLACE TEMP TABLE cp_nested_windows AS
SELECT count(*) AS nested_count FROM _cp_prefix_annotations WHERE nested;

-- extends_to_device_end: an annotation window runs on to the end of the device work
-- launched inside it; a step's end already says where the next step starts.
CREATE OR REPLACE TEMP TABLE cp_windows AS
SELECT run_id, rank, step, name, start_us, end_us, false AS extends_to_device_end
FROM steps
WHERE $window_prefix IS NULL AND ($run_id IS NULL OR run_id = $run_id)
UNION ALL
SELECT run_id, rank,
       row_number() OVER (PARTITION BY run_id, rank ORDER BY ts_us, event_id) AS step,
       name, ts_us, end_us, true
FROM _cp_prefix_annotations
WHERE NOT nested;

-- Threads that form the logical CPU thread; pollers and helpers stay out.
CREATE OR REPLACE TEMP TABLE _cp_lanes AS
SELECT run_id, rank, pid, tid, role
FROM threads
WHERE role IN ('main', 'autograd')
  AND (run_id, rank) IN (SELECT DISTINCT run_id, rank FROM cp_windows);

-- Ops, runtime calls and python frames on those threads, with their nesting:
-- an op is top-level when it starts at or after the end of every earlier op of its thread.
-- Python frames are neither top-level nor under a top-level op: they skip the two window
-- sorts (with_stack traces hold more frames than ops).
CREATE OR REPLACE TEMP TABLE cp_ops AS
WITH lane_events AS NOT MATERIALIZED (
    SELECT e.run_id, e.rank, e.event_id, e.name, e.cat, e.pid, e.tid, e.ts_us, e.end_us,
           e.correlation, l.role, e.cat = 'python_function' AS is_python
    FROM events AS e
    JOIN _cp_lanes AS l USING (run_id, rank, pid, tid)
    WHERE e.ph = 'X' AND e.dur_us IS NOT NULL
      AND (is_cpu_op_event(e.cat, e.name) OR e.cat = 'python_function' OR is_runtime_category(e.cat))
),
nested AS (
    SELECT *,
        ts_us >= coalesce(max(end_us) OVER (
            PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, end_us DESC, event_id
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), '-infinity'::DOUBLE) AS is_top
    FROM lane_events
    WHERE NOT is_python
)
SELECT *,
    last_value(CASE WHEN is_top THEN event_id END IGNORE NULLS) OVER (
        PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, end_us DESC, event_id
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS top_event_id
FROM nested
UNION ALL
SELECT *, false AS is_top, NULL::BIGINT AS top_event_id
FROM lane_events
WHERE is_python;

-- GPU work of the analysed ranks, with the call that launched it (when it was traced on the
-- logical thread). launch_enqueued_us: when the CPU had handed the op over: the end of an
-- asynchronous launch, the start of a blocking one (the rest of that call is waiting, not
-- launching). has_traced_launch: some CPU event of the rank carries the op's correlation; an
-- op without one was launched before profiling began.
CREATE OR REPLACE TEMP TABLE cp_gpu_ops AS
WITH cpu_correlations AS (
    SELECT DISTINCT run_id, rank, correlation
    FROM events
    WHERE correlation IS NOT NULL AND ph = 'X' AND NOT is_device_category(cat)
      AND (run_id, rank) IN (SELECT DISTINCT run_id, rank FROM cp_windows)
)
SELECT g.run_id, g.rank, g.event_id, g.name, g.cat, g.stream, g.ts_us, g.end_us, g.correlation,
       c.event_id AS launch_event_id, c.ts_us AS launch_start_us, c.end_us AS launch_end_us,
       CASE WHEN is_blocking_sync_call(c.name) OR is_blocking_copy(g.name) THEN c.ts_us ELSE c.end_us END
           AS launch_enqueued_us,
       c.top_event_id, c.tid AS launch_tid,
       traced.correlation IS NOT NULL AS has_traced_launch
FROM events AS g
LEFT JOIN cp_ops AS c
    ON c.run_id = g.run_id AND c.rank = g.rank AND c.correlation = g.correlation
   AND is_runtime_category(c.cat)
LEFT JOIN cpu_correlations AS traced
    ON traced.run_id = g.run_id AND traced.rank = g.rank AND traced.correlation = g.correlation
WHERE g.ph = 'X' AND is_gpu_work(g.cat) AND g.dur_us IS NOT NULL
  AND (g.run_id, g.rank) IN (SELECT DISTINCT run_id, rank FROM cp_windows);

-- User annotations (context for phases): every CPU annotation except the step markers.
CREATE OR REPLACE TEMP TABLE cp_annotations AS
SELECT e.run_id, e.rank, e.name, e.ts_us, e.end_us
FROM events AS e
JOIN _cp_lanes AS l USING (run_id, rank, pid, tid)
WHERE e.ph = 'X' AND is_annotation_event(e.cat, e.name) AND NOT starts_with(e.name, 'ProfilerStep#');

-- Collectives gloo runs on its worker threads: `gloo:*` annotations on a thread outside the
-- logical thread. The main thread hands the work over in a c10d call and later waits for it
-- (DDP's reducer for its buckets, Work.wait) with nothing recorded: a gap on its thread.
-- A synchronous gloo call (send, recv) runs on the calling thread: its annotation lies inside
-- the call, which the logical thread's nodes already hold.
CREATE OR REPLACE TEMP TABLE cp_comm_ops AS
SELECT e.run_id, e.rank, e.event_id, e.name, e.cat, e.pid, e.tid, e.ts_us, e.end_us
FROM events AS e
WHERE e.ph = 'X' AND is_annotation_event(e.cat, e.name) AND starts_with(e.name, 'gloo:') AND e.dur_us IS NOT NULL
  AND (e.run_id, e.rank) IN (SELECT DISTINCT run_id, rank FROM cp_windows)
  AND NOT EXISTS (SELECT 1 FROM _cp_lanes AS l
                  WHERE l.run_id = e.run_id AND l.rank = e.rank AND l.pid = e.pid AND l.tid = e.tid);
