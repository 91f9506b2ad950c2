-- Every analysed step of a run with its length, slowest first: the Gantt's default step and
-- the per-rank comparison. Parameters: run_id.
SELECT rank, step, name, window_us
FROM analysis_windows
WHERE run_id = $run_id
ORDER BY window_us DESC, rank, step;
