-- name: step_trend
-- description: step time per bucket of consecutive steps: mean, stddev and coefficient of variation
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- param: bucket_steps INTEGER = 10            consecutive step numbers per bucket
-- key: mean_step_us, cv
SELECT run, bucket, first_step, last_step, step_count, mean_step_us, stddev_step_us, round(cv, 4) AS cv
FROM analysis_step_trend($run, $rank, bucket_steps := $bucket_steps)
ORDER BY run, bucket;
