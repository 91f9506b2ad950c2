-- Counted time on the path per rank, phase and method, summed over the run's steps: the
-- composition of the path, compared across ranks. Parameters: run_id.
SELECT c.method, c.rank, coalesce(n.phase, n.kind) AS phase, sum(c.counted_us) AS path_us
FROM critical_path AS c
JOIN nodes AS n USING (run_id, rank, step, method, node_id)
WHERE c.run_id = $run_id
GROUP BY ALL
ORDER BY c.method, c.rank, phase;
