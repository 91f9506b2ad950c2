-- name: kernel_breakdown
-- description: GPU time per kernel class (compute, communication, memory) and the top kernels of each, per rank
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- param: top INTEGER = 5                      kernels kept per rank and class
-- param: include_last_step BOOLEAN = false    keep the last step (HTA drops it when a rank has 2+ steps)
-- key: total_us, share_pct
SELECT run, rank, kernel_type, type_total_us, rank_in_type, name, kernel_count, total_us, mean_us, max_us,
       round(share_pct, 2) AS share_pct
FROM analysis_kernel_breakdown($run, $rank, include_last_step := $include_last_step)
WHERE rank_in_type <= $top
ORDER BY run, rank, type_total_us DESC, rank_in_type;
