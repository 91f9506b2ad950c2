-- reads: cp_top_nodes, cp_wait_returns, cp_gpu_ops, events, cp_windows, cp_ops, cp_comm_ops
-- makes: _cp_cpu_nodes(run_id, rank, step, cpu_node, pid, tid, phase, stream, start_us, end_us,
--                     label, ends_with_sync, sync_start_us, sync_end_us, last_top_event_id)
-- makes: cp_gpu_in_window(run_id, rank, event_id, name, cat, stream, ts_us, end_us, correlation,
--                         launch_event_id, launch_start_us, launch_end_us, launch_enqueued_us,
--                         top_event_id, launch_tid, has_traced_launch, step, cpu_node, phase,
--                         prev_end_on_stream)
-- makes: cp_sync_events(run_id, rank, correlation, name, stream, wait_on_stream,
--                       record_correlation)
-- makes: _cp_recorded_waits(run_id, rank, source_event_id, target_event_id, inferred)
-- makes: _cp_inferred_waits(run_id, rank, source_event_id, target_event_id, inferred)
-- makes: cp_stream_waits(run_id, rank, source_event_id, target_event_id, inferred)
-- makes: cp_gpu_split(run_id, rank, event_id, name, cat, stream, ts_us, end_us, correlation,
--                     launch_event_id, launch_start_us, launch_end_us, launch_enqueued_us,
--                     top_event_id, launch_tid, has_traced_launch, step, cpu_node, phase,
--                     prev_end_on_stream, split_no)
-- makes: cp_carry_ops(run_id, rank, step, event_id, stream, ts_us, end_us, name, cat, phase,
--                     split_no)
-- makes: _cp_comm_in_window(run_id, rank, event_id, name, cat, pid, tid, ts_us, end_us, step)
-- makes: cp_nodes(node_id, run_id, rank, step, kind, phase, stream, tid, pid, start_us, end_us,
--                 carry_in, label, ends_with_sync, sync_start_us, sync_end_us, cpu_node, split_no,
--                 comm_event_id)
-- param: wait_gap_max_us DOUBLE
-- param: wait_gap_us DOUBLE
-- param: wait_gap_ratio DOUBLE
-- param: split_starved BOOLEAN
-- param: starve_gap_us DOUBLE
-- Stage 3: CPU nodes, GPU nodes (one per launching CPU node and stream, split where the
-- GPU waited: on another stream, or, with $split_starved, for its own launch), carry-in
-- nodes, and the numbering of all nodes of a window.

CREATE OR REPLACE TEMP TABLE _cp_cpu_nodes AS
SELECT run_id, rank, step, cpu_node,
       any_value(pid) AS pid, any_value(tid) AS tid, any_value(phase) AS phase,
       arg_min(launch_stream, logical_seq) FILTER (WHERE launch_stream IS NOT NULL) AS stream,
       min(ts_us) AS start_us, max(node_part_end_us) AS end_us,
       arg_min(name, logical_seq) AS label,
       arg_max(has_sync, logical_seq) AS ends_with_sync,
       arg_max(sync_start_us, logical_seq) AS sync_start_us,
       arg_max(sync_end_us, logical_seq) AS sync_end_us,
       arg_max(event_id, logical_seq) AS last_top_event_id
FROM cp_top_nodes
GROUP BY run_id, rank, step, cpu_node
UNION ALL
SELECT run_id, rank, step, cpu_node, pid, tid, phase, NULL, start_us, end_us,
       'after ' || sync_name, next_sync_end_us IS NOT NULL, next_sync_start_us, next_sync_end_us,
       top_event_id
FROM cp_wait_returns;

-- GPU ops launched from a CPU node of a window, in stream order with their gaps. An op
-- launched after a sync returned belongs to that sync's wait-return node.
CREATE OR REPLACE TEMP TABLE cp_gpu_in_window AS
WITH after_wait AS (
    -- the last wait return of the op's top-level event that began at or before the launch
    -- (of two beginning at once, the later sync's). An equality join: few ops share a
    -- top-level event with a sync, and an ASOF join sorted every op with its columns (twice
    -- this statement's time at paper scale)
    SELECT g.run_id, g.rank, g.event_id, arg_max(r.cpu_node, (r.start_us, r.sync_event_id)) AS cpu_node
    FROM cp_gpu_ops AS g
    JOIN cp_wait_returns AS r
        ON r.run_id = g.run_id AND r.rank = g.rank AND r.top_event_id = g.top_event_id
       AND g.launch_start_us >= r.start_us
    GROUP BY g.run_id, g.rank, g.event_id
),
attributed AS (
    SELECT g.*, n.step, coalesce(r.cpu_node, n.cpu_node) AS cpu_node, n.phase
    FROM cp_gpu_ops AS g
    LEFT JOIN cp_top_nodes AS n
        ON n.run_id = g.run_id AND n.rank = g.rank AND n.event_id = g.top_event_id
    LEFT JOIN after_wait AS r
        ON r.run_id = g.run_id AND r.rank = g.rank AND r.event_id = g.event_id
)
SELECT *,
       lag(end_us) OVER (PARTITION BY run_id, rank, stream ORDER BY ts_us, event_id) AS prev_end_on_stream
FROM attributed;

-- Does the trace record GPU-side sync events? Without them, waits are inferred from timing.
CREATE OR REPLACE TEMP TABLE cp_sync_events AS
SELECT e.run_id, e.rank, e.correlation, e.name, e.stream,
       TRY_CAST(e.args ->> 'wait_on_stream' AS BIGINT) AS wait_on_stream,
       TRY_CAST(e.args ->> 'wait_on_cuda_event_record_corr_id' AS BIGINT) AS record_correlation
FROM events AS e
WHERE e.ph = 'X' AND e.cat = 'cuda_sync'
  AND (e.run_id, e.rank) IN (SELECT DISTINCT run_id, rank FROM cp_windows);

-- Cross-stream waits recorded by cudaStreamWaitEvent (cuda_sync 'Stream Wait Event'):
-- the source is the last op launched on the recording stream before cudaEventRecord,
-- the target the first op launched on the waiting stream after cudaStreamWaitEvent.
CREATE OR REPLACE TEMP TABLE _cp_recorded_waits AS
WITH waits AS (
    SELECT s.run_id, s.rank, s.stream AS waiting_stream, s.wait_on_stream,
           rec.ts_us AS record_ts_us, call.ts_us AS wait_call_ts_us
    FROM cp_sync_events AS s
    JOIN cp_ops AS call ON call.run_id = s.run_id AND call.rank = s.rank AND call.correlation = s.correlation
        AND is_runtime_category(call.cat)
    JOIN cp_ops AS rec ON rec.run_id = s.run_id AND rec.rank = s.rank AND rec.correlation = s.record_correlation
        AND is_runtime_category(rec.cat)
    WHERE s.name = 'Stream Wait Event' AND s.wait_on_stream IS NOT NULL
),
sources AS (
    SELECT w.*, arg_max(g.event_id, g.launch_start_us) AS source_event_id
    FROM waits AS w
    JOIN cp_gpu_in_window AS g ON g.run_id = w.run_id AND g.rank = w.rank AND g.stream = w.wait_on_stream
        AND g.launch_start_us < w.record_ts_us
    GROUP BY ALL
)
SELECT s.run_id, s.rank, s.source_event_id, arg_min(g.event_id, g.launch_start_us) AS target_event_id,
       false AS inferred
FROM sources AS s
JOIN cp_gpu_in_window AS g ON g.run_id = s.run_id AND g.rank = s.rank AND g.stream = s.waiting_stream
    AND g.launch_start_us > s.wait_call_ts_us
GROUP BY ALL;

-- Inferred cross-stream waits (traces without cuda_sync events): an op that sat well past both
-- its launch and its stream predecessor waited for something; an op on another stream that
-- was launched before it and ended just before it started is the likely cause. "Just before"
-- weighs the evidence: the longer the op sat, the wider the gap that still reads as a
-- hand-off: a tenth of the wait, at least $wait_gap_us (hand-offs measured at 1-11 us) and
-- at most $wait_gap_max_us (beyond it, unrelated ends become likely by chance). docs/method.md
-- has the measurements. `--wait-gap-us N` makes the tolerance N whatever the wait.
CREATE OR REPLACE TEMP TABLE _cp_inferred_waits AS
WITH waited AS (
    SELECT k.run_id, k.rank, k.event_id, k.stream, k.ts_us, k.launch_start_us,
           least($wait_gap_max_us, greatest($wait_gap_us, $wait_gap_ratio * (k.ts_us - greatest(
               coalesce(k.prev_end_on_stream, '-infinity'::DOUBLE),
               coalesce(k.launch_enqueued_us, '-infinity'::DOUBLE))))) AS tolerance_us
    FROM cp_gpu_in_window AS k
    WHERE k.cpu_node IS NOT NULL
      AND k.ts_us > greatest(coalesce(k.prev_end_on_stream, '-infinity'::DOUBLE),
                             coalesce(k.launch_enqueued_us, '-infinity'::DOUBLE)) + $wait_gap_us
      AND (k.run_id, k.rank) NOT IN (SELECT DISTINCT run_id, rank FROM cp_sync_events)
)
SELECT k.run_id, k.rank, arg_max(o.event_id, o.end_us) AS source_event_id, k.event_id AS target_event_id,
       true AS inferred
FROM waited AS k
JOIN cp_gpu_ops AS o
    ON o.run_id = k.run_id AND o.rank = k.rank AND o.stream <> k.stream
   AND o.end_us <= k.ts_us AND o.end_us >= k.ts_us - $wait_gap_max_us
-- a cause was enqueued before the op that waited for it (an event is recorded after its op's
-- launch and waited on before the waiting op's launch); work with no traced launch may be one
WHERE o.end_us >= k.ts_us - k.tolerance_us
  AND (o.launch_start_us IS NULL OR k.launch_start_us IS NULL OR o.launch_start_us < k.launch_start_us)
GROUP BY k.run_id, k.rank, k.event_id;

CREATE OR REPLACE TEMP TABLE cp_stream_waits AS
SELECT * FROM _cp_recorded_waits
UNION ALL
SELECT * FROM _cp_inferred_waits;

-- Split points: an op that waited on another stream, or (with $split_starved) one whose
-- launch returned after the stream went idle, so the GPU sat waiting for the CPU.
CREATE OR REPLACE TEMP TABLE cp_gpu_split AS
SELECT g.*,
    sum(CASE WHEN w.target_event_id IS NOT NULL
              OR ($split_starved AND g.launch_enqueued_us >= g.prev_end_on_stream
                  AND g.ts_us > g.prev_end_on_stream + $starve_gap_us)
             THEN 1 ELSE 0 END) OVER (
        PARTITION BY g.run_id, g.rank, g.step, g.cpu_node, g.stream ORDER BY g.ts_us, g.event_id) AS split_no
FROM cp_gpu_in_window AS g
LEFT JOIN (SELECT DISTINCT run_id, rank, target_event_id FROM cp_stream_waits) AS w
    ON w.run_id = g.run_id AND w.rank = g.rank AND w.target_event_id = g.event_id
WHERE g.cpu_node IS NOT NULL;

-- Carry-in: GPU work of earlier windows still running when a window starts, and work
-- launched before profiling began (no CPU event carries its correlation) that runs in the
-- rank's first window, wherever in it it starts. A stream's carry-in is one node per run of
-- its ops, split as a window's own GPU nodes are where an op waited on another stream, and
-- around each NCCL kernel, a node of its own: merged, the rank a collective waited for and
-- the work that waited on it would hide in one long node.
CREATE OR REPLACE TEMP TABLE cp_carry_ops AS
WITH first_windows AS (
    SELECT run_id, rank, min(start_us) AS first_start_us FROM cp_windows GROUP BY ALL
),
carried AS (
    SELECT w.run_id, w.rank, w.step, g.event_id, g.stream, g.ts_us, g.end_us, g.name, g.cat, g.phase,
           is_collective_kernel(g.name) AS collective
    FROM cp_windows AS w
    JOIN first_windows AS f ON f.run_id = w.run_id AND f.rank = w.rank
    JOIN cp_gpu_in_window AS g
        ON g.run_id = w.run_id AND g.rank = w.rank AND g.end_us > w.start_us AND g.ts_us < w.end_us
       AND (g.launch_start_us < w.start_us
            OR (g.launch_start_us IS NULL AND g.ts_us < w.start_us)
            OR (g.correlation IS NOT NULL AND NOT g.has_traced_launch AND w.start_us = f.first_start_us))
),
bounded AS (
    SELECT c.*,
           c.collective OR coalesce(lag(c.collective) OVER s, false) OR w.target_event_id IS NOT NULL AS opens_node
    FROM carried AS c
    LEFT JOIN (SELECT DISTINCT run_id, rank, target_event_id FROM cp_stream_waits) AS w
        ON w.run_id = c.run_id AND w.rank = c.rank AND w.target_event_id = c.event_id
    WINDOW s AS (PARTITION BY c.run_id, c.rank, c.step, c.stream ORDER BY c.ts_us, c.event_id)
)
SELECT run_id, rank, step, event_id, stream, ts_us, end_us, name, cat, phase,
       sum(opens_node::INTEGER) OVER (
           PARTITION BY run_id, rank, step, stream ORDER BY ts_us, event_id) AS split_no
FROM bounded;

-- gloo executions (cp_comm_ops) with the window that holds their start: each is a CPU node of
-- its worker thread, communication whatever the phase rules say (it is a collective's run).
CREATE OR REPLACE TEMP TABLE _cp_comm_in_window AS
SELECT o.*, w.step
FROM cp_comm_ops AS o
ASOF JOIN cp_windows AS w
    ON o.run_id = w.run_id AND o.rank = w.rank AND o.ts_us >= w.start_us
WHERE o.ts_us < w.end_us;

-- All nodes of every window, numbered in time order. comm_event_id: the gloo execution a
-- communication node holds (NULL for every other node).
CREATE OR REPLACE TEMP TABLE cp_nodes AS
WITH all_nodes AS (
    SELECT run_id, rank, step, 'cpu' AS kind, phase, stream, tid, pid, start_us, end_us,
           false AS carry_in, label, ends_with_sync, sync_start_us, sync_end_us,
           cpu_node, NULL::BIGINT AS split_no, NULL::BIGINT AS comm_event_id
    FROM _cp_cpu_nodes
    UNION ALL
    SELECT run_id, rank, step, 'gpu', any_value(phase), stream, any_value(launch_tid), NULL,
           min(ts_us), max(end_us), false, arg_min(name, ts_us), false, NULL, NULL, cpu_node, split_no, NULL
    FROM cp_gpu_split
    GROUP BY run_id, rank, step, cpu_node, stream, split_no
    UNION ALL
    SELECT run_id, rank, step, 'gpu', coalesce(arg_min(phase, ts_us), 'Other'), stream, NULL, NULL,
           min(ts_us), max(end_us), true, arg_min(name, ts_us), false, NULL, NULL, NULL, split_no, NULL
    FROM cp_carry_ops
    GROUP BY run_id, rank, step, stream, split_no
    UNION ALL
    SELECT run_id, rank, step, 'cpu', 'Communication', NULL, tid, pid, ts_us, end_us, false, name, false,
           NULL, NULL, NULL, NULL, event_id
    FROM _cp_comm_in_window
)
SELECT row_number() OVER (
           PARTITION BY run_id, rank, step ORDER BY start_us, kind, cpu_node, stream, split_no, comm_event_id)
           AS node_id,
       *
FROM all_nodes;
