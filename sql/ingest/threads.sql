-- reads: events
-- writes: threads
-- param: run_id INTEGER
-- param: rank INTEGER
-- Name every CPU thread and GPU lane of one trace and give it a role.
-- The autograd thread is found by name (pt_autograd_N) or by the backward nodes it runs;
-- the main thread is the op-running thread that marks the steps, else a thread running
-- forward work (the markers may sit on a thread of their own), else the marker thread.
INSERT INTO threads
WITH activity AS (
    SELECT
        pid, tid,
        count(*) AS event_count,
        bool_or(is_device_category(cat)) AS on_device,
        count(*) FILTER (WHERE name LIKE 'ProfilerStep#%' AND NOT is_device_category(cat)) AS step_marks,
        count(*) FILTER (WHERE name LIKE 'autograd::engine::evaluate_function:%') AS backward_nodes,
        count(*) FILTER (WHERE is_cpu_op_event(cat, name)) AS cpu_ops
    FROM events
    WHERE run_id = $run_id AND rank = $rank AND ph <> 'M' AND pid IS NOT NULL AND tid IS NOT NULL
    GROUP BY pid, tid
),
named AS (
    -- a tid can be named twice (pt_main_thread, then pt_autograd_0): the autograd name wins
    SELECT pid, tid,
           arg_max(args ->> 'name', (coalesce(args ->> 'name', '') LIKE '%pt_autograd%', event_id)) AS name
    FROM events
    WHERE run_id = $run_id AND rank = $rank AND ph = 'M' AND name = 'thread_name'
    GROUP BY pid, tid
),
lanes AS (
    SELECT
        coalesce(a.pid, n.pid) AS pid,
        coalesce(a.tid, n.tid) AS tid,
        trim(n.name) AS name,
        coalesce(a.event_count, 0) AS event_count,
        coalesce(a.on_device, false) OR coalesce(n.name, '') LIKE 'stream %' AS on_device,
        coalesce(a.step_marks, 0) AS step_marks,
        coalesce(a.backward_nodes, 0) AS backward_nodes,
        coalesce(a.cpu_ops, 0) AS cpu_ops,
        coalesce(n.name, '') LIKE '%pt_autograd%' AS autograd_named
    FROM activity AS a
    FULL OUTER JOIN named AS n ON a.pid = n.pid AND a.tid = n.tid
),
ranked AS (
    SELECT *,
        row_number() OVER (
            -- a thread that marks steps and runs ops; else one running forward (non-backward)
            -- work; else the thread holding the step markers; then names and size
            ORDER BY (NOT on_device AND NOT autograd_named AND cpu_ops + step_marks > 0) DESC,
                     (step_marks > 0 AND cpu_ops > 0) DESC,
                     (cpu_ops > 0 AND backward_nodes = 0) DESC,
                     step_marks > 0 DESC,
                     coalesce(name, '') LIKE '%pt_main_thread%' DESC,
                     pid = tid DESC,
                     cpu_ops DESC
        ) AS main_rank
    FROM lanes
)
SELECT
    $run_id, $rank, pid, tid, name,
    CASE
        WHEN on_device THEN 'stream'
        WHEN main_rank = 1 AND NOT autograd_named AND cpu_ops + step_marks > 0 THEN 'main'
        WHEN autograd_named OR backward_nodes > 0 THEN 'autograd'
        ELSE 'other'
    END AS role,
    event_count
FROM ranked;
