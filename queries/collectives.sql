-- name: collectives
-- description: communication kernels with collective name, message size, group, process group and bus bandwidth
-- param: run VARCHAR = NULL                   run name; all runs when NULL
-- param: rank INTEGER = NULL                  rank; all ranks when NULL
-- key: collective, msg_bytes, busbw_gbps
SELECT run, rank, collective, dtype, in_nelems, out_nelems, group_size, process_group, process_group_desc,
       msg_bytes, ts_us, dur_us, round(algbw_gbps, 3) AS algbw_gbps, round(busbw_gbps, 3) AS busbw_gbps,
       meta_source, stream, kernel_name
FROM analysis_collectives
WHERE ($run IS NULL OR run = $run) AND ($rank IS NULL OR rank = $rank)
ORDER BY run, rank, ts_us;
