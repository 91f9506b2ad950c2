-- reads: steps, events, analysis_windows
-- makes: wi_windows(run_id, rank, step, start_us, end_us, window_us, cpu_end_us, device_ends_step,
--                   window_index, reported)
-- param: rank INTEGER
-- param: run_id INTEGER
-- param: all_ranks BOOLEAN
-- param: step BIGINT
-- The windows a scenario replays (analysis_windows of one run, rank and step, or all).
-- Steps partition the timeline (sql/ingest/steps.sql): a step's CPU side ends where the next
-- step starts, and only the last step of a rank (or an annotation window, which runs on to
-- its device work) ends when its device work ends; there the CPU side ends with the
-- ProfilerStep annotation. device_ends_step: the window lasts until its device work ends.
-- With $all_ranks (a multi-rank replay couples the ranks' collectives) every rank is replayed
-- and `reported` marks the ranks asked for.
CREATE OR REPLACE TEMP TABLE wi_windows AS
WITH ordered AS (
    SELECT w.*, lead(w.start_us) OVER (PARTITION BY w.run_id, w.rank ORDER BY w.start_us, w.step) IS NULL AS last_window
    FROM analysis_windows AS w
)
SELECT w.run_id, w.rank, w.step, w.start_us, w.end_us, w.window_us,
       CASE WHEN w.last_window THEN least(w.end_us, coalesce(a.end_us, w.end_us)) ELSE w.end_us END AS cpu_end_us,
       w.last_window OR w.e2e_end_us > w.end_us AS device_ends_step,
       dense_rank() OVER (ORDER BY w.run_id, w.rank, w.step) - 1 AS window_index,
       ($rank IS NULL OR w.rank = $rank) AS reported
FROM ordered AS w
LEFT JOIN steps AS s ON s.run_id = w.run_id AND s.rank = w.rank AND s.step = w.step AND s.start_us = w.start_us
LEFT JOIN events AS a ON a.run_id = s.run_id AND a.rank = s.rank AND a.event_id = s.event_id
WHERE ($run_id IS NULL OR w.run_id = $run_id) AND ($all_ranks OR $rank IS NULL OR w.rank = $rank)
  AND ($step IS NULL OR w.step = $step);
