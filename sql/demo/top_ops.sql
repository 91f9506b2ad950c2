-- The operators and GPU ops of a run that take the most time in total (inclusive
-- time, summed over every call): the classic time-summing view the demo starts from.
SELECT
    name,
    cat AS category,
    count(*) AS calls,
    sum(dur_us) AS total_us,
    avg(dur_us) AS mean_us
FROM events
WHERE run_id = $run_id AND ph = 'X'
  AND kineto_category(cat, name) IN ('cpu_op', 'kernel', 'gpu_memcpy', 'gpu_memset')  -- 1.8-1.9's names too
GROUP BY name, cat
ORDER BY total_us DESC, name
LIMIT $top;
