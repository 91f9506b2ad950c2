-- The nodes of one step of one rank for the Gantt chart, one lane per CPU thread and GPU
-- stream, with the path each node is on (ctda, per_thread or both).
-- Parameters: run_id, rank, step.
WITH on_path AS (
    SELECT node_id, list(method ORDER BY method) AS methods
    FROM critical_path
    WHERE run_id = $run_id AND rank = $rank AND step = $step
    GROUP BY node_id
)
SELECT n.node_id, n.kind,
       CASE WHEN n.kind = 'gpu' THEN 'GPU stream ' || n.stream
            ELSE 'CPU ' || coalesce(t.role || ' ', '') || n.tid END AS lane,
       n.start_us, n.end_us, coalesce(n.phase, n.kind) AS phase, n.label, n.event_count,
       coalesce(list_contains(p.methods, 'ctda'), false) AS on_ctda,
       coalesce(list_contains(p.methods, 'per_thread'), false) AS on_per_thread
FROM nodes AS n
LEFT JOIN threads AS t ON t.run_id = n.run_id AND t.rank = n.rank AND t.pid = n.pid AND t.tid = n.tid
    AND n.kind = 'cpu'
LEFT JOIN on_path AS p USING (node_id)
WHERE n.run_id = $run_id AND n.rank = $rank AND n.step = $step AND n.method = 'ctda'
ORDER BY n.kind, lane, n.start_us;
