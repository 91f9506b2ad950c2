-- name: waiting_on
-- description: per step, the rank that made the others wait most at collectives (join on run with experiments)
-- param: run VARCHAR = NULL        run name; all runs when NULL
-- param: top INTEGER = 1000        rows to keep
-- key: waiting_on_rank, caused_wait_us
WITH caused AS (
    -- each matched collective: the wait it cost the other ranks, charged to its last arrival
    SELECT run_id, min(step) AS step, pg, seq, any_value(last_rank) AS last_rank, sum(wait_us) AS wait_us
    FROM collective_instances
    WHERE matched
    GROUP BY run_id, pg, seq
),
per_rank AS (
    SELECT run_id, step, last_rank AS rank, sum(wait_us) AS caused_wait_us, count(*) AS last_arrivals
    FROM caused GROUP BY ALL
)
SELECT r.name AS run, p.step,
       arg_max(p.rank, (p.caused_wait_us, -p.rank)) AS waiting_on_rank,
       max(p.caused_wait_us) AS caused_wait_us,
       arg_max(p.last_arrivals, (p.caused_wait_us, -p.rank)) AS last_arrivals,
       sum(p.last_arrivals) AS collectives,
       sum(p.caused_wait_us) AS total_wait_us,
       max(p.caused_wait_us) / nullif(sum(p.caused_wait_us), 0) AS share_of_wait
FROM per_rank AS p
JOIN runs AS r USING (run_id)
WHERE $run IS NULL OR r.name = $run
GROUP BY r.name, p.run_id, p.step
ORDER BY run, p.step
LIMIT $top;
