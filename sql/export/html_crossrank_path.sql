-- The cross-rank path of one step on one time axis: each path node with the rank it ran on,
-- its counted window in aligned time (the node rank's clock minus its estimated offset,
-- traces.clock_offset_us), phase and label. Parameters: run_id, step.
SELECT p.seq, coalesce(p.node_rank, p.rank) AS node_rank, p.kind,
       p.counted_start_us - coalesce(t.clock_offset_us, 0) AS start_us,
       p.counted_end_us - coalesce(t.clock_offset_us, 0) AS end_us,
       p.counted_us, p.edge_type, coalesce(n.phase, p.kind) AS phase, coalesce(n.label, p.kind) AS label
FROM critical_path AS p
JOIN traces AS t ON t.run_id = p.run_id AND t.rank = coalesce(p.node_rank, p.rank)
LEFT JOIN nodes AS n ON n.run_id = p.run_id AND n.rank = coalesce(p.node_rank, p.rank) AND n.step = p.step
    AND n.method = 'ctda' AND n.node_id = p.node_id
WHERE p.run_id = $run_id AND p.step = $step AND p.method = 'cross_rank'
ORDER BY p.seq;
