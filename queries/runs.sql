-- name: runs
-- description: the ingested runs with their ranks, steps, events and --meta metadata
-- param: run VARCHAR = NULL  run name; all runs when NULL
-- key: run, ranks, steps
SELECT
    r.name AS run,
    r.run_id,
    r.ingested_at,
    count(t.rank) AS ranks,
    max(t.world_size) AS world_size,
    coalesce(sum(t.event_count), 0) AS events,
    (SELECT count(*) FROM steps AS s WHERE s.run_id = r.run_id) AS steps,
    r.meta
FROM runs AS r
LEFT JOIN traces AS t USING (run_id)
WHERE $run IS NULL OR r.name = $run
GROUP BY r.name, r.run_id, r.ingested_at, r.meta
ORDER BY r.run_id;
