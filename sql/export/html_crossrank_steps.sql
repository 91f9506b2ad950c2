-- The steps of a run that have a cross-rank path, slowest first (in aligned time, from the
-- first node to the last): the report draws the slowest. Parameters: run_id.
SELECT step, max(counted_end_us - coalesce(t.clock_offset_us, 0))
             - min(counted_start_us - coalesce(t.clock_offset_us, 0)) AS span_us,
       count(DISTINCT coalesce(p.node_rank, p.rank)) AS ranks_visited
FROM critical_path AS p
JOIN traces AS t ON t.run_id = p.run_id AND t.rank = coalesce(p.node_rank, p.rank)
WHERE p.run_id = $run_id AND p.method = 'cross_rank'
GROUP BY step
ORDER BY span_us DESC, step;
