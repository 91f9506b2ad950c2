-- Mean CPCR per method over the windows of the runs a lake analyze wrote, the figure
-- `ctda-sql analyze` prints. Parameter: run_ids (the runs analysed).
SELECT p.method, avg(p.path_us / w.window_us) AS cpcr
FROM (
    SELECT method, run_id, rank, step, sum(counted_us) AS path_us
    FROM critical_path
    WHERE list_contains($run_ids, run_id)
    GROUP BY ALL
) AS p
JOIN analysis_windows AS w USING (run_id, rank, step)
GROUP BY p.method
ORDER BY p.method;
