-- Collective skew: one row per matched collective of a run, when it started (aligned clocks,
-- ms-ready microseconds since the run's first collective), how far apart the ranks arrived,
-- who arrived last and how long the others waited in all. Parameters: run_id.
WITH calls AS (
    SELECT pg, seq, min(step) AS step, any_value(name) AS name, max(bytes) AS bytes,
           any_value(last_rank) AS last_rank, any_value(skew_us) AS skew_us, sum(wait_us) AS total_wait_us,
           min(aligned_start_us) AS start_us
    FROM collective_instances
    WHERE run_id = $run_id AND matched
    GROUP BY pg, seq
)
SELECT pg, seq, step, name, bytes, last_rank, skew_us, total_wait_us,
       start_us - min(start_us) OVER () AS since_first_us
FROM calls
ORDER BY start_us, pg, seq;
