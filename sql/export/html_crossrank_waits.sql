-- Who everyone waited for, per step: the time ranks spent waiting at matched collectives,
-- charged to the rank that arrived last (collective_instances, aligned clocks), per step and
-- waited-for rank. A collective's step is the earliest step a rank made it in, as in the
-- waiting_on report. Parameters: run_id.
WITH calls AS (
    SELECT pg, seq, min(step) AS step, any_value(last_rank) AS last_rank, sum(wait_us) AS wait_us
    FROM collective_instances
    WHERE run_id = $run_id AND matched
    GROUP BY pg, seq
)
SELECT step, last_rank AS waited_for_rank, sum(wait_us) AS wait_us, count(*) AS collectives
FROM calls
WHERE wait_us > 0 AND step IS NOT NULL
GROUP BY step, last_rank
ORDER BY step, waited_for_rank;
