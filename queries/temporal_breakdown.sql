-- name: temporal_breakdown
-- description: GPU time per rank split into compute, non-compute (communication + memory) and idle, as HTA does
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- param: step BIGINT = NULL                   only GPU work launched in this step; the whole scope when NULL
-- param: include_last_step BOOLEAN = false    keep the last step (HTA drops it when a rank has 2+ steps)
-- param: hta_rounding BOOLEAN = false         round times as HTA does on fractional-timestamp traces
-- key: idle_pct, compute_pct, non_compute_pct
SELECT run, rank, idle_us, compute_us, non_compute_us, kernel_us,
       round(idle_pct, 2) AS idle_pct, round(compute_pct, 2) AS compute_pct,
       round(non_compute_pct, 2) AS non_compute_pct
FROM analysis_temporal_breakdown($run, $rank, include_last_step := $include_last_step,
                                 step_no := $step, hta_rounding := $hta_rounding)
ORDER BY run, rank;
