-- One line about a run for the demo: ranks, events, steps and threads by role.
SELECT
    r.name AS run,
    (SELECT string_agg(rank::VARCHAR, ', ' ORDER BY rank) FROM traces WHERE run_id = r.run_id) AS ranks,
    (SELECT count(*) FROM events WHERE run_id = r.run_id) AS events,
    (SELECT count(*) FROM steps WHERE run_id = r.run_id) AS steps,
    (SELECT string_agg(role || ': ' || n, ', ' ORDER BY role)
       FROM (SELECT role, count(*) AS n FROM threads WHERE run_id = r.run_id GROUP BY role)) AS threads
FROM runs AS r
WHERE r.run_id = $run_id;
