-- name: stragglers
-- description: per rank z-score of a measure against all ranks of its run; flags |z| above the threshold
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: measure VARCHAR = step_us            step_us (mean step time) or annotation_us (mean duration of `annotation`)
-- param: annotation VARCHAR = NULL            annotation or op name for measure annotation_us
-- param: threshold DOUBLE = 2.0               |z| above this flags a straggler
SELECT run, rank, measure, value_us, samples, run_mean_us, run_stddev_us, round(z_score, 3) AS z_score, straggler
FROM analysis_stragglers($run, measure_name := $measure, annotation_name := $annotation, z_threshold := $threshold)
ORDER BY run, rank;
