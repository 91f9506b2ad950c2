-- name: cross_rank_hotspots
-- description: what decides step time across ranks: counted time on the cross-rank path per rank and event, annotations with the path time they enclose, and shares of the path's span
-- param: run VARCHAR = NULL        run name; all runs when NULL
-- param: step BIGINT = NULL        step; all steps when NULL
-- param: top INTEGER = 20          rows to keep
-- key: path_us, share_of_span
WITH scope AS (
    SELECT s.run_id, s.step, s.rank, s.from_us, s.to_us
    FROM cross_rank_segments AS s
    JOIN runs AS r USING (run_id)
    WHERE ($run IS NULL OR r.name = $run) AND ($step IS NULL OR s.step = $step)
),
counted AS (
    SELECT e.node_rank AS rank, e.name, e.cat, e.self_us, e.run_id, e.step
    FROM path_events AS e
    WHERE e.method = 'cross_rank' AND (e.run_id, e.step) IN (SELECT run_id, step FROM scope)
),
span AS (
    -- the time the path spans, over all its stretches
    SELECT sum(to_us - from_us) AS span_us FROM scope
),
events_on_path AS (
    SELECT rank, name, cat AS category, sum(self_us) AS path_us, count(*) AS occurrences,
           count(DISTINCT (run_id, step)) AS steps
    FROM counted GROUP BY ALL
),
-- user annotations (a sleep, a data-loading block) hold time the events above do not:
-- the stretch of the path on their rank that they enclose, gaps included
annotations_on_path AS (
    SELECT a.rank, a.name, a.cat AS category,
           sum(least(a.end_us, s.to_us) - greatest(a.ts_us, s.from_us)) AS path_us,
           count(*) AS occurrences, count(DISTINCT (s.run_id, s.step)) AS steps
    FROM scope AS s
    JOIN events AS a
        ON a.run_id = s.run_id AND a.rank = s.rank AND a.ph = 'X' AND is_annotation_event(a.cat, a.name)
       AND NOT starts_with(a.name, 'ProfilerStep#') AND a.ts_us < s.to_us AND a.end_us > s.from_us
    -- on the threads the path follows (main and autograd), not on helper threads
    JOIN threads AS t
        ON t.run_id = a.run_id AND t.rank = a.rank AND t.pid = a.pid AND t.tid = a.tid
       AND t.role IN ('main', 'autograd')
    GROUP BY ALL
)
SELECT rank, name, category, path_us, path_us / nullif((SELECT span_us FROM span), 0) AS share_of_span,
       occurrences, steps
FROM (SELECT * FROM events_on_path UNION ALL SELECT * FROM annotations_on_path)
WHERE path_us > 0
ORDER BY path_us DESC, rank, name
LIMIT $top;
