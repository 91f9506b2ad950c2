-- The windows a scenario replays (analysis_windows of one run, rank and step, or all).
CREATE OR REPLACE TEMP TABLE wi_windows AS
SELECT w.run_id, w.rank, w.step, w.start_us, w.end_us, w.window_us,
       dense_rank() OVER (ORDER BY w.run_id, w.rank, w.step) - 1 AS window_index
FROM analysis_windows AS w
WHERE ($run_id IS NULL OR w.run_id = $run_id) AND ($rank IS NULL OR w.rank = $rank)
  AND ($step IS NULL OR w.step = $step);
