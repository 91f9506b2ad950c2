-- name: comm_overlap
-- description: share of communication kernel time overlapped by compute kernels, per rank
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- param: step BIGINT = NULL                   only GPU work launched in this step; the whole scope when NULL
-- param: include_last_step BOOLEAN = false    keep the last step (HTA drops it when a rank has 2+ steps)
-- param: hta_rounding BOOLEAN = false         round times as HTA does on fractional-timestamp traces
-- key: overlap_pct
SELECT run, rank, communication_us, overlapped_us, round(overlap_pct, 2) AS overlap_pct
FROM analysis_comm_overlap($run, $rank, include_last_step := $include_last_step,
                           step_no := $step, hta_rounding := $hta_rounding)
ORDER BY run, rank;
