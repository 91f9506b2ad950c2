-- The edges of one step worth drawing on the Gantt chart: every cross_thread and sync edge
-- of the ctda graph, and each hop of a method's critical path (from the end of one counted
-- window to the start of the next). Parameters: run_id, rank, step.
SELECT 'edge' AS what, e.type, e.inferred, e.src, e.dst,
       e.effective_end_us AS from_us, d.start_us AS to_us
FROM edges AS e
JOIN nodes AS d ON d.run_id = e.run_id AND d.rank = e.rank AND d.step = e.step
    AND d.method = e.method AND d.node_id = e.dst
WHERE e.run_id = $run_id AND e.rank = $rank AND e.step = $step AND e.method = 'ctda'
  AND e.type IN ('cross_thread', 'sync')
UNION ALL
SELECT c.method, c.edge_type, NULL, c.node_id, lead(c.node_id) OVER w,
       c.counted_end_us, lead(c.counted_start_us) OVER w
FROM critical_path AS c
WHERE c.run_id = $run_id AND c.rank = $rank AND c.step = $step
WINDOW w AS (PARTITION BY c.method ORDER BY c.seq)
QUALIFY lead(c.node_id) OVER w IS NOT NULL
ORDER BY what, from_us;
