-- GPU time analyses: temporal breakdown, communication/compute overlap, idle time per stream.
-- Arguments shared by all: run_name (NULL = every run), rank_no (NULL = every rank),
-- include_last_step (see analysis_scope), step_no (NULL = the whole scope).

-- A time as one HUGEINT that sorts by run, rank, then time in whole picoseconds (exact for
-- µs values with up to 6 decimals within 106 days of the run's origin). A running max over
-- all ranks in one ORDER BY (3x faster than PARTITION BY in DuckDB 2.0) then never takes a
-- value of another rank for one of this rank: those keys are below the rank's floor.
CREATE OR REPLACE TEMP MACRO analysis_rank_floor(run_id, rank) AS
    ((run_id::HUGEINT << 32) + rank) << 64;
CREATE OR REPLACE TEMP MACRO analysis_rank_time(run_id, rank, t_us) AS
    analysis_rank_floor(run_id, rank) + (1::HUGEINT << 63) + CAST(round(t_us * 1e6) AS BIGINT);

-- Idle µs before an op that starts at start_key when the earlier ops (sorted by start) of
-- its set reach until_key: positive only when it opens a new island of the union.
CREATE OR REPLACE TEMP MACRO analysis_gap_us(start_key, until_key, floor_key) AS
    if(until_key >= floor_key, greatest(start_key - until_key, 0) / 1e6, 0);

-- Length of a set's union: its span minus the gaps before its islands (0 for no op).
CREATE OR REPLACE TEMP MACRO analysis_union_us(member, ts_us, end_us, gap_us) AS
    coalesce(max(end_us) FILTER (WHERE member) - min(ts_us) FILTER (WHERE member)
             - sum(gap_us) FILTER (WHERE member), 0);

-- Busy time (length of the union of GPU op intervals, so overlapping streams count once)
-- per rank of all ops, compute, communication, and either of the two, in one sorted pass.
CREATE OR REPLACE TEMP MACRO analysis_busy_per_rank(run_name, rank_no, include_last_step := false,
    step_no := NULL, hta_rounding := false) AS TABLE
WITH swept AS (
    SELECT run, run_id, rank, ts_us, end_us,
           kernel_type = 'compute' AS is_compute, kernel_type = 'communication' AS is_communication,
           analysis_rank_time(run_id, rank, ts_us) AS start_key,
           analysis_rank_floor(run_id, rank) AS floor_key,
           max(analysis_rank_time(run_id, rank, end_us)) OVER earlier AS all_until,
           max(analysis_rank_time(run_id, rank, end_us)) FILTER (WHERE is_compute) OVER earlier AS compute_until,
           max(analysis_rank_time(run_id, rank, end_us)) FILTER (WHERE is_communication) OVER earlier
               AS communication_until,
           max(analysis_rank_time(run_id, rank, end_us)) FILTER (WHERE is_compute OR is_communication)
               OVER earlier AS comm_or_compute_until
    FROM analysis_gpu_work(run_name, rank_no, include_last_step := include_last_step,
                           hta_rounding := hta_rounding, step_no := step_no)
    WINDOW earlier AS (ORDER BY run_id, rank, ts_us ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
SELECT run, rank,
       max(end_us) - min(ts_us) AS kernel_us,
       analysis_union_us(true, ts_us, end_us, analysis_gap_us(start_key, all_until, floor_key)) AS gpu_busy_us,
       analysis_union_us(is_compute, ts_us, end_us, analysis_gap_us(start_key, compute_until, floor_key))
           AS compute_us,
       analysis_union_us(is_communication, ts_us, end_us,
                         analysis_gap_us(start_key, communication_until, floor_key)) AS communication_us,
       analysis_union_us(is_compute OR is_communication, ts_us, end_us,
                         analysis_gap_us(start_key, comm_or_compute_until, floor_key)) AS comm_or_compute_us
FROM swept
GROUP BY run, run_id, rank;

-- HTA's temporal breakdown: kernel_us spans the first GPU op start to the last end; idle is
-- the part of it with no op running; compute wins an overlap, the rest of busy time is
-- non-compute (communication and memory).
CREATE OR REPLACE TEMP MACRO analysis_temporal_breakdown(run_name, rank_no, include_last_step := false,
    step_no := NULL, hta_rounding := false) AS TABLE
SELECT run, rank,
       kernel_us - gpu_busy_us AS idle_us,
       compute_us,
       gpu_busy_us - compute_us AS non_compute_us,
       kernel_us,
       100 * (kernel_us - gpu_busy_us) / nullif(kernel_us, 0) AS idle_pct,
       100 * compute_us / nullif(kernel_us, 0) AS compute_pct,
       100 * (gpu_busy_us - compute_us) / nullif(kernel_us, 0) AS non_compute_pct
FROM analysis_busy_per_rank(run_name, rank_no, include_last_step := include_last_step,
    step_no := step_no, hta_rounding := hta_rounding);

-- Share of communication kernel time during which a compute kernel also runs.
-- |comm ∩ compute| = |comm| + |compute| - |comm ∪ compute| on the merged intervals.
CREATE OR REPLACE TEMP MACRO analysis_comm_overlap(run_name, rank_no, include_last_step := false,
    step_no := NULL, hta_rounding := false) AS TABLE
SELECT run, rank, communication_us,
       communication_us + compute_us - comm_or_compute_us AS overlapped_us,
       100 * (communication_us + compute_us - comm_or_compute_us) / nullif(communication_us, 0) AS overlap_pct
FROM analysis_busy_per_rank(run_name, rank_no, include_last_step := include_last_step,
    step_no := step_no, hta_rounding := hta_rounding);

-- HTA's idle time categories, per stream: the gap before each GPU op is host_wait when the
-- op's launch call started after the previous op ended (the CPU was late), kernel_wait
-- when it is shorter than kernel_wait_us (back-to-back launch overhead), else other.
CREATE OR REPLACE TEMP MACRO analysis_idle_gaps(run_name, rank_no, include_last_step := false,
    kernel_wait_us := 30, hta_rounding := false) AS TABLE
WITH ordered AS (
    SELECT run, rank, stream, ts_us, launch_ts_us,
           lag(end_us) OVER (PARTITION BY run_id, rank, stream ORDER BY ts_us, event_id) AS prev_end_us
    FROM analysis_gpu_work(run_name, rank_no, include_last_step := include_last_step,
                            hta_rounding := hta_rounding)
)
SELECT run, rank, stream,
       greatest(ts_us - prev_end_us, 0) AS idle_us,
       CASE WHEN launch_ts_us > prev_end_us THEN 'host_wait'
            WHEN ts_us - prev_end_us < kernel_wait_us THEN 'kernel_wait'
            ELSE 'other' END AS category
FROM ordered
WHERE prev_end_us IS NOT NULL;

-- Idle time per stream and category (all three listed, zero when absent) and its share.
CREATE OR REPLACE TEMP MACRO analysis_idle_time(run_name, rank_no, include_last_step := false,
    kernel_wait_us := 30, hta_rounding := false) AS TABLE
WITH per_stream AS (
    SELECT run, rank, stream,
           [coalesce(sum(idle_us) FILTER (WHERE category = 'host_wait'), 0),
            coalesce(sum(idle_us) FILTER (WHERE category = 'kernel_wait'), 0),
            coalesce(sum(idle_us) FILTER (WHERE category = 'other'), 0)] AS idle
    FROM analysis_idle_gaps(run_name, rank_no, include_last_step := include_last_step,
        kernel_wait_us := kernel_wait_us, hta_rounding := hta_rounding)
    GROUP BY run, rank, stream
)
SELECT run, rank, stream, unnest(['host_wait', 'kernel_wait', 'other']) AS category, unnest(idle) AS idle_us,
       unnest(idle) / nullif(list_sum(idle), 0) AS ratio
FROM per_stream;
