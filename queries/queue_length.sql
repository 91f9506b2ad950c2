-- name: queue_length
-- description: outstanding GPU operations per stream (max, mean) and time blocked on a full launch queue
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- param: max_queue_length INTEGER = 1024      launch queue capacity per stream (CUDA: 1024)
-- param: include_last_step BOOLEAN = false    keep the last step (HTA drops it when a rank has 2+ steps)
-- key: max_queue_length, blocked_us
SELECT run, rank, stream, change_points, max_queue_length, mean_queue_length, time_weighted_mean, blocked_us
FROM analysis_queue_length($run, $rank, include_last_step := $include_last_step,
                           max_queue_length := $max_queue_length)
ORDER BY run, rank, stream;
