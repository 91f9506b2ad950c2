-- name: run_diff
-- description: two runs side by side: count and total time per op/kernel name, the difference, added/removed names
-- param: run_a VARCHAR = NULL                 the baseline run (required)
-- param: run_b VARCHAR = NULL                 the run compared with it (required)
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- param: step_a BIGINT = NULL                 only this step of run_a; all events when NULL
-- param: step_b BIGINT = NULL                 only this step of run_b; all events when NULL
-- param: device VARCHAR = all                 all, cpu or gpu
-- key: diff_us, change
SELECT name, count_a, count_b, total_us_a, total_us_b, diff_count, diff_us, change
FROM analysis_run_diff(
    CASE WHEN $run_a IS NULL OR $run_b IS NULL THEN error('run_diff needs run_a and run_b')
         WHEN $run_a NOT IN (SELECT name FROM runs) THEN error('run_diff: no run named ' || $run_a)
         WHEN $run_b NOT IN (SELECT name FROM runs) THEN error('run_diff: no run named ' || $run_b)
         ELSE $run_a END,
    $run_b, rank_no := $rank, step_a := $step_a, step_b := $step_b, device := $device)
ORDER BY abs(diff_us) DESC, name;
