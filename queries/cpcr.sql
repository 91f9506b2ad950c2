-- name: cpcr
-- description: Critical-path coverage per step, with the rest of the step split by cause
-- param: run VARCHAR = NULL        run name; all runs when NULL
-- param: rank INTEGER = NULL       rank; all ranks when NULL
-- param: step BIGINT = NULL        step (window) number; all steps when NULL
-- param: method VARCHAR = NULL     ctda or per_thread; both when NULL
-- param: top INTEGER = 1000        rows to keep
-- counted + cpu_gap + gpu_idle + launch_delay + between_nodes + slack_before + slack_after = step
WITH path AS (
    SELECT run_id, rank, step, method,
           sum(counted_us) AS path_us,
           coalesce(sum(counted_end_us - counted_start_us - counted_us) FILTER (WHERE kind = 'cpu'), 0) AS cpu_gap_us,
           coalesce(sum(counted_end_us - counted_start_us - counted_us) FILTER (WHERE kind = 'gpu'), 0) AS gpu_idle_us,
           coalesce(sum(gap_before_us) FILTER (WHERE gap_kind = 'launch_delay'), 0) AS launch_delay_us,
           coalesce(sum(gap_before_us) FILTER (WHERE gap_kind = 'between_nodes'), 0) AS between_nodes_us,
           coalesce(sum(gap_before_us) FILTER (WHERE gap_kind = 'slack_before'), 0) AS slack_before_us,
           max(counted_end_us) AS last_counted_end_us,
           count(*) AS path_nodes
    FROM critical_path
    GROUP BY run_id, rank, step, method
)
SELECT r.name AS run, p.rank, p.step, p.method,
       w.window_us AS step_us,
       p.path_us,
       p.path_us / w.window_us AS cpcr,
       p.cpu_gap_us, p.gpu_idle_us, p.launch_delay_us, p.between_nodes_us, p.slack_before_us,
       w.e2e_end_us - p.last_counted_end_us AS slack_after_us,
       p.path_nodes
FROM path AS p
JOIN analysis_windows AS w USING (run_id, rank, step)
JOIN runs AS r USING (run_id)
WHERE ($run IS NULL OR r.name = $run) AND ($rank IS NULL OR p.rank = $rank)
  AND ($step IS NULL OR p.step = $step) AND ($method IS NULL OR p.method = $method)
ORDER BY run, p.rank, p.step, p.method
LIMIT $top;
