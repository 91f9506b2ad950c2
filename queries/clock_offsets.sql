-- name: clock_offsets
-- description: per rank, the clock offset estimated from matched collectives (subtract it to align with the lowest rank)
-- param: run VARCHAR = NULL        run name; all runs when NULL
-- key: clock_offset_us
SELECT r.name AS run, t.rank, t.metadata ->> 'host_name' AS host, t.clock_offset_us,
       (SELECT count(*) FROM collective_instances AS i
        WHERE i.run_id = t.run_id AND i.rank = t.rank AND i.matched) AS matched_collectives
FROM traces AS t
JOIN runs AS r USING (run_id)
WHERE $run IS NULL OR r.name = $run
ORDER BY run, t.rank;
