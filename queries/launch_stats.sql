-- name: launch_stats
-- description: per kernel launch, longest launch delay first: CPU call time, GPU time, launch delay, with short-kernel and outlier flags
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- param: runtime_cutoff_us DOUBLE = 50        launch calls longer than this are runtime outliers
-- param: launch_delay_cutoff_us DOUBLE = 100  launch delays longer than this are outliers
-- param: include_memory BOOLEAN = true        include cudaMemcpyAsync / cudaMemsetAsync launches
-- param: flagged_only BOOLEAN = false         keep only launches with a flag set
-- param: include_last_step BOOLEAN = false    keep the last step (HTA drops it when a rank has 2+ steps)
-- param: top INTEGER = 1000                   launches kept, longest delay first; every launch when NULL
-- key: launch_delay_us, gpu_us
-- kernel names join after the cut: carrying them through the launch pick costs more
WITH launches AS (
    SELECT * EXCLUDE (kernel_name)
    FROM analysis_launch_stats($run, $rank, include_last_step := $include_last_step,
                               runtime_cutoff_us := $runtime_cutoff_us,
                               launch_delay_cutoff_us := $launch_delay_cutoff_us, include_memory := $include_memory)
    WHERE NOT $flagged_only OR short_kernel OR runtime_outlier OR launch_delay_outlier
    ORDER BY launch_delay_us DESC, cpu_us DESC, run, rank, launch_ts_us, correlation
    LIMIT $top
)
SELECT l.run, l.rank, l.correlation, l.launch_name, e.name AS kernel_name, l.stream, l.launch_ts_us, l.cpu_us,
       l.gpu_us, l.launch_delay_us, l.short_kernel, l.runtime_outlier, l.launch_delay_outlier
FROM launches AS l
JOIN events AS e ON e.run_id = l.run_id AND e.rank = l.rank AND e.event_id = l.event_id
    AND e.stream >= 0  -- always true here; lets the scan skip CPU events before reading names
ORDER BY l.launch_delay_us DESC, l.cpu_us DESC, l.run, l.rank, l.launch_ts_us, l.correlation;
