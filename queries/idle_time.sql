-- name: idle_time
-- description: GPU idle time per stream split into host_wait, kernel_wait and other (HTA's categories)
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- param: kernel_wait_us DOUBLE = 30           gaps shorter than this (and not host waits) are kernel_wait
-- param: include_last_step BOOLEAN = false    keep the last step (HTA drops it when a rank has 2+ steps)
-- param: hta_rounding BOOLEAN = false         round times as HTA does on fractional-timestamp traces
-- key: category, idle_us, ratio
SELECT run, rank, stream, category, idle_us, round(ratio, 4) AS ratio
FROM analysis_idle_time($run, $rank, include_last_step := $include_last_step,
                        kernel_wait_us := $kernel_wait_us, hta_rounding := $hta_rounding)
ORDER BY run, rank, stream, category;
