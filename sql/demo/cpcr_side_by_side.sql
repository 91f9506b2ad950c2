-- Critical-path coverage of every step of a run, ctda beside per_thread: how much of the
-- step each method can explain. Parameters: run_id.
SELECT c.rank, c.step, any_value(w.window_us) AS step_us,
       sum(c.counted_us) FILTER (WHERE c.method = 'ctda') AS ctda_path_us,
       round(sum(c.counted_us) FILTER (WHERE c.method = 'ctda') / any_value(w.window_us), 3) AS ctda_cpcr,
       sum(c.counted_us) FILTER (WHERE c.method = 'per_thread') AS per_thread_path_us,
       round(sum(c.counted_us) FILTER (WHERE c.method = 'per_thread') / any_value(w.window_us), 3) AS per_thread_cpcr
FROM critical_path AS c
JOIN analysis_windows AS w USING (run_id, rank, step)
WHERE c.run_id = $run_id
GROUP BY c.rank, c.step
ORDER BY c.rank, c.step;
