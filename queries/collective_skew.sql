-- name: collective_skew
-- description: per matched collective: the rank that arrived last, the arrival skew and how long each rank waited (aligned clocks)
-- param: run VARCHAR = NULL        run name; all runs when NULL
-- param: step BIGINT = NULL        step; all steps when NULL
-- param: top INTEGER = 1000        rows to keep
-- key: last_rank, skew_us
-- a point-to-point pair (pg '<group>:<sender>-><receiver>') is listed as 'recv/send'
SELECT r.name AS run, min(i.step) AS step, i.pg, i.seq, array_to_string(list_sort(list(DISTINCT i.name)), '/') AS name,
       max(i.bytes) AS bytes,
       any_value(i.last_rank) AS last_rank, any_value(i.skew_us) AS skew_us,
       map_from_entries(list(struct_pack(k := i.rank, v := round(i.wait_us, 1)) ORDER BY i.rank)) AS wait_us_by_rank,
       sum(i.wait_us) AS total_wait_us,
       count(*) AS ranks
FROM collective_instances AS i
JOIN runs AS r USING (run_id)
WHERE i.matched AND ($run IS NULL OR r.name = $run)
GROUP BY r.name, i.run_id, i.pg, i.seq
HAVING $step IS NULL OR min(i.step) = $step
ORDER BY run, step, i.seq, i.pg
LIMIT $top;
