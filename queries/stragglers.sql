-- name: stragglers
-- description: per rank z-score of a measure against all ranks of its run; flags |z| above the threshold, or in runs too small for that (|z| <= sqrt(ranks - 1)) a value min_excess above the run's median; waiting_on names who made the others wait
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: measure VARCHAR = step_us            step_us (mean step time) or annotation_us (mean duration of `annotation`)
-- param: annotation VARCHAR = NULL            annotation or op name for measure annotation_us
-- param: threshold DOUBLE = 2.0               |z| above this flags a straggler
-- param: min_excess DOUBLE = 0.1              in runs too small for the z rule: the share above the run's median that flags a straggler
-- key: straggler, z_score
WITH scored AS (
    SELECT s.*,
           count(*) OVER run_ranks AS ranks,
           median(s.value_us) OVER run_ranks AS run_median_us
    FROM analysis_stragglers($run, measure_name := $measure, annotation_name := $annotation,
                             z_threshold := $threshold) AS s
    WINDOW run_ranks AS (PARTITION BY s.run)
),
ruled AS (
    -- with population stddev no |z| can exceed sqrt(ranks - 1): below 6 ranks a threshold
    -- of 2 could never flag anyone, so those runs compare each rank with the median instead
    SELECT *, sqrt(ranks - 1) <= $threshold AS too_few_ranks,
           value_us / nullif(run_median_us, 0) - 1 AS above_median
    FROM scored
)
SELECT run, rank, measure, value_us,
       CASE WHEN too_few_ranks THEN coalesce(above_median > $min_excess, false) ELSE straggler END AS straggler,
       CASE WHEN ranks = 1 THEN 'one rank: nobody to compare with'
            WHEN too_few_ranks
            THEN printf('%d ranks: |z| cannot exceed %.2f, so a rank %.0f%% above the median is flagged; '
                        'report waiting_on names who made the others wait', ranks, sqrt(ranks - 1), 100 * $min_excess)
            ELSE printf('|z| above %g is flagged; report waiting_on names who made the others wait', $threshold)
       END AS rule,
       round(z_score, 3) AS z_score, round(above_median, 3) AS above_median, samples, run_mean_us, run_stddev_us
FROM ruled
ORDER BY run, rank;
