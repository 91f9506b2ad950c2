-- reads: cp_ops, cp_gpu_ops, cp_windows, cp_annotations, phase_rules, cp_comm_ops
-- makes: _cp_syncs(run_id, rank, top_event_id, event_id, name, correlation, pid, tid, sync_start_us,
--                 sync_end_us, copy_gpu_event_id, sync_seq)
-- makes: _cp_tops(run_id, rank, step, event_id, name, pid, tid, role, ts_us, end_us, launch_stream,
--                sync_start_us, sync_end_us, has_sync, annotations, node_part_end_us)
-- makes: _cp_top_phases(run_id, rank, event_id, phase)
-- makes: cp_comm_waits(run_id, rank, event_id, comm_event_id, comm_end_us)
-- makes: cp_top_nodes(run_id, rank, step, event_id, name, pid, tid, role, ts_us, end_us,
--                     launch_stream, sync_start_us, sync_end_us, has_sync, annotations,
--                     node_part_end_us, phase, logical_seq, prev_tid, prev_phase, after_wait,
--                     segment, carried_stream, cpu_node)
-- makes: cp_wait_returns(run_id, rank, step, cpu_node, sync_event_id, top_event_id, sync_name,
--                        sync_correlation, copy_gpu_event_id, sync_start_us, sync_end_us, pid, tid,
--                        phase, start_us, end_us, next_sync_start_us, next_sync_end_us)
-- param: comm_resume_ratio DOUBLE
-- param: comm_resume_us DOUBLE
-- Stage 2: top-level events with their window, phase, launched stream and blocking syncs,
-- then CPU nodes: runs of consecutive top-level events of the logical thread sharing
-- OS thread, phase, launched stream and sync segment.

-- Blocking syncs inside each top-level event, in order. A sync waits: the CPU node holding
-- it ends where the (first) sync returns, and the rest of the top-level event after each
-- sync is a node of its own (a wait return, below), which the GPU work the sync waited for
-- gates through a sync edge.
CREATE OR REPLACE TEMP TABLE _cp_syncs AS
SELECT o.run_id, o.rank, o.top_event_id, o.event_id, o.name, o.correlation, o.pid, o.tid,
       o.ts_us AS sync_start_us, o.end_us AS sync_end_us,
       coalesce(blocking_copy.event_id, -1) AS copy_gpu_event_id,
       row_number() OVER (PARTITION BY o.run_id, o.rank, o.top_event_id
                          ORDER BY o.end_us, o.event_id) AS sync_seq
FROM cp_ops AS o
LEFT JOIN cp_gpu_ops AS blocking_copy
    ON blocking_copy.launch_event_id = o.event_id AND blocking_copy.run_id = o.run_id
   AND blocking_copy.rank = o.rank AND is_blocking_copy(blocking_copy.name)
WHERE NOT o.is_python AND (is_blocking_sync_call(o.name) OR blocking_copy.event_id IS NOT NULL)
QUALIFY row_number() OVER (PARTITION BY o.run_id, o.rank, o.event_id ORDER BY blocking_copy.event_id) = 1;

CREATE OR REPLACE TEMP TABLE _cp_tops AS
WITH tops AS (
    SELECT o.run_id, o.rank, w.step, o.event_id, o.name, o.pid, o.tid, o.role, o.ts_us, o.end_us
    FROM cp_ops AS o
    ASOF JOIN cp_windows AS w
        ON o.run_id = w.run_id AND o.rank = w.rank AND o.ts_us >= w.start_us
    WHERE o.is_top AND o.ts_us < w.end_us
),
launches AS (
    SELECT run_id, rank, top_event_id, arg_min(stream, launch_start_us) AS launch_stream
    FROM cp_gpu_ops WHERE top_event_id IS NOT NULL
    GROUP BY ALL
),
first_sync AS (
    SELECT run_id, rank, top_event_id, sync_start_us, sync_end_us
    FROM _cp_syncs WHERE sync_seq = 1
),
window_annotations AS (
    -- each annotation under every window it touches, so that the containment join below pairs
    -- a top-level event only with its own window's annotations, not with all of its rank's
    SELECT a.run_id, a.rank, w.step, a.name, a.ts_us, a.end_us
    FROM cp_annotations AS a
    JOIN cp_windows AS w
        ON w.run_id = a.run_id AND w.rank = a.rank AND a.ts_us <= w.end_us AND a.end_us >= w.start_us
),
context AS (
    SELECT t.run_id, t.rank, t.event_id,
           array_to_string(list_transform(list_sort(list({'ts_us': a.ts_us, 'name': a.name})), lambda x: x.name), '|')
               AS annotations
    FROM tops AS t
    JOIN window_annotations AS a
        ON a.run_id = t.run_id AND a.rank = t.rank AND a.step = t.step
       AND a.ts_us <= t.ts_us AND a.end_us >= t.end_us
    GROUP BY ALL
)
SELECT t.*, l.launch_stream, s.sync_start_us, s.sync_end_us, s.sync_end_us IS NOT NULL AS has_sync,
       coalesce(c.annotations, '') AS annotations,
       -- where this event's part of its node ends: at the first sync's return, if any
       least(t.end_us, coalesce(s.sync_end_us, t.end_us)) AS node_part_end_us
FROM tops AS t
LEFT JOIN launches AS l ON l.run_id = t.run_id AND l.rank = t.rank AND l.top_event_id = t.event_id
LEFT JOIN first_sync AS s ON s.run_id = t.run_id AND s.rank = t.rank AND s.top_event_id = t.event_id
LEFT JOIN context AS c ON c.run_id = t.run_id AND c.rank = t.rank AND c.event_id = t.event_id;

-- Phase of each top-level event: the matching rule with the lowest priority. Patterns are
-- matched once per distinct (name, annotations, role), not per event: far fewer regexes.
CREATE OR REPLACE TEMP TABLE _cp_top_phases AS
WITH kinds AS (
    SELECT DISTINCT name, annotations, role FROM _cp_tops
),
classified AS (
    SELECT k.name, k.annotations, k.role, arg_min(r.phase, r.priority) AS phase
    FROM kinds AS k
    JOIN phase_rules AS r
        ON (r.name_pattern IS NULL OR regexp_matches(k.name, r.name_pattern, 'i'))
       AND (r.annotation_pattern IS NULL OR regexp_matches(k.annotations, r.annotation_pattern, 'i'))
       AND (r.thread_role IS NULL OR r.thread_role = k.role)
    GROUP BY ALL
)
SELECT t.run_id, t.rank, t.event_id, c.phase
FROM _cp_tops AS t
JOIN classified AS c USING (name, annotations, role);

-- Waits on gloo executions (cp_comm_ops) with nothing recorded: DDP's reducer waiting for its
-- buckets, Work.wait. The logical thread sits idle and resumes when the execution has ended.
-- On a busy CPU the two threads' records drift apart (the worker may close its annotation
-- after the main thread resumed, the main thread may wake late), so the execution waited for
-- is the one whose end lies nearest the resume, among those running in the idle stretch
-- (started before the resume, ended after the thread went idle), within 15 % of the stretch
-- ($comm_resume_ratio); a resume after the end gets at least $comm_resume_us. docs/method.md
-- has the measured lags. The nearest ends before and after the resume come from two ASOF joins.
CREATE OR REPLACE TEMP TABLE cp_comm_waits AS
WITH resumes AS (
    SELECT run_id, rank, event_id, ts_us, idle_from_us, $comm_resume_ratio * (ts_us - idle_from_us) AS share_us
    FROM (
        SELECT run_id, rank, event_id, ts_us,
               max(end_us) OVER (PARTITION BY run_id, rank ORDER BY ts_us, event_id
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS idle_from_us
        FROM _cp_tops
    )
    WHERE ts_us > idle_from_us
),
comm_ends AS (
    SELECT run_id, rank, event_id AS comm_event_id, ts_us AS comm_start_us, end_us AS comm_end_us FROM cp_comm_ops
),
candidates AS (
    SELECT r.*, g.comm_event_id, g.comm_start_us, g.comm_end_us,
           r.ts_us - g.comm_end_us <= greatest($comm_resume_us, r.share_us) AS near
    FROM resumes AS r
    ASOF JOIN comm_ends AS g ON g.run_id = r.run_id AND g.rank = r.rank AND g.comm_end_us <= r.ts_us
    UNION ALL
    SELECT r.*, g.comm_event_id, g.comm_start_us, g.comm_end_us, g.comm_end_us - r.ts_us <= r.share_us
    FROM resumes AS r
    ASOF JOIN comm_ends AS g ON g.run_id = r.run_id AND g.rank = r.rank AND g.comm_end_us > r.ts_us
)
SELECT run_id, rank, event_id, comm_event_id, comm_end_us
FROM candidates
WHERE near AND comm_start_us < ts_us AND comm_end_us > idle_from_us
QUALIFY row_number() OVER (PARTITION BY run_id, rank, event_id ORDER BY abs(ts_us - comm_end_us), comm_event_id) = 1;

-- Node boundaries on the logical thread (events of all its OS threads in time order): a change
-- of thread or phase, after a blocking sync, before a resume from a gloo wait, a change of the
-- stream launched onto.
CREATE OR REPLACE TEMP TABLE cp_top_nodes AS
WITH ordered AS (
    SELECT t.*, coalesce(p.phase, 'Other') AS phase,
           row_number() OVER w AS logical_seq,
           lag(t.tid) OVER w AS prev_tid,
           lag(coalesce(p.phase, 'Other')) OVER w AS prev_phase,
           coalesce(lag(t.has_sync) OVER w, false) OR cw.event_id IS NOT NULL AS after_wait
    FROM _cp_tops AS t
    LEFT JOIN _cp_top_phases AS p USING (run_id, rank, event_id)
    LEFT JOIN cp_comm_waits AS cw USING (run_id, rank, event_id)
    WINDOW w AS (PARTITION BY t.run_id, t.rank, t.step ORDER BY t.ts_us, t.event_id)
),
segmented AS (
    SELECT *,
        sum(CASE WHEN prev_tid IS DISTINCT FROM tid OR prev_phase IS DISTINCT FROM phase OR after_wait
                 THEN 1 ELSE 0 END) OVER (PARTITION BY run_id, rank, step ORDER BY logical_seq) AS segment
    FROM ordered
),
stream_switches AS (
    -- only events that launch something can switch the node's stream
    SELECT *,
        last_value(launch_stream IGNORE NULLS) OVER (
            PARTITION BY run_id, rank, step, segment ORDER BY logical_seq
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS carried_stream
    FROM segmented
)
SELECT *,
    sum(CASE WHEN logical_seq = 1 OR prev_tid IS DISTINCT FROM tid OR prev_phase IS DISTINCT FROM phase
                  OR after_wait OR launch_stream <> carried_stream
             THEN 1 ELSE 0 END) OVER (PARTITION BY run_id, rank, step ORDER BY logical_seq) AS cpu_node
FROM stream_switches;

-- Wait returns: after each blocking sync, the rest of its top-level event (up to the next
-- sync's return, or the event's end) is a CPU node of its own, numbered -(sync event id) so
-- it never collides with the positive node numbers above. It starts where the wait ended.
CREATE OR REPLACE TEMP TABLE cp_wait_returns AS
SELECT s.run_id, s.rank, t.step, -s.event_id AS cpu_node, s.event_id AS sync_event_id,
       s.top_event_id, s.name AS sync_name, s.correlation AS sync_correlation, s.copy_gpu_event_id,
       s.sync_start_us, s.sync_end_us, t.pid, t.tid, t.phase,
       s.sync_end_us AS start_us,
       greatest(s.sync_end_us, coalesce(lead(s.sync_end_us) OVER (
           PARTITION BY s.run_id, s.rank, s.top_event_id ORDER BY s.sync_seq), t.end_us)) AS end_us,
       lead(s.sync_start_us) OVER (
           PARTITION BY s.run_id, s.rank, s.top_event_id ORDER BY s.sync_seq) AS next_sync_start_us,
       lead(s.sync_end_us) OVER (
           PARTITION BY s.run_id, s.rank, s.top_event_id ORDER BY s.sync_seq) AS next_sync_end_us
FROM _cp_syncs AS s
JOIN cp_top_nodes AS t ON t.run_id = s.run_id AND t.rank = s.rank AND t.event_id = s.top_event_id;
