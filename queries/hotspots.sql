-- name: hotspots
-- description: Events that decide step time: counted (self) time on the critical path, ranked
-- param: run VARCHAR = NULL        run name; all runs when NULL
-- param: rank INTEGER = NULL       rank; all ranks when NULL
-- param: step BIGINT = NULL        step (window) number; all steps when NULL
-- param: method VARCHAR = ctda     ctda or per_thread
-- param: top INTEGER = 20          rows to keep
-- key: path_us, share_of_path
WITH scope AS (
    SELECT w.run_id, w.rank, w.step, w.window_us
    FROM analysis_windows AS w
    JOIN runs AS r USING (run_id)
    WHERE ($run IS NULL OR r.name = $run) AND ($rank IS NULL OR w.rank = $rank)
      AND ($step IS NULL OR w.step = $step)
),
counted AS (
    SELECT e.name, e.cat, e.self_us, e.inclusive_us, e.run_id, e.rank, e.step
    FROM path_events AS e
    JOIN scope USING (run_id, rank, step)
    WHERE e.method = $method
),
totals AS (
    SELECT (SELECT sum(self_us) FROM counted) AS path_total_us,
           (SELECT sum(window_us) FROM scope) AS window_total_us
)
SELECT name,
       cat AS category,
       sum(self_us) AS path_us,
       sum(self_us) / any_value(path_total_us) AS share_of_path,
       sum(self_us) / any_value(window_total_us) AS share_of_total,
       sum(inclusive_us) AS inclusive_us,
       count(*) AS occurrences,
       count(DISTINCT (run_id, rank, step)) AS windows
FROM counted CROSS JOIN totals
GROUP BY name, cat
HAVING sum(self_us) > 0
ORDER BY path_us DESC, name
LIMIT $top;
