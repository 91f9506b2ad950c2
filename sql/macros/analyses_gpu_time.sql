-- GPU time analyses: temporal breakdown, communication/compute overlap, idle time per stream.
-- Arguments shared by all: run_name (NULL = every run), rank_no (NULL = every rank),
-- include_last_step (see analysis_scope), step_no (NULL = the whole scope).

-- Total length of the union of GPU op intervals per rank and interval set, so overlapping
-- streams count once. Sets: all, compute, communication, comm_or_compute.
-- Merging: sorted by start, an op opens a new island when it starts after every earlier op ended.
CREATE OR REPLACE TEMP MACRO analysis_busy_by_set(run_name, rank_no, include_last_step := false,
    step_no := NULL, hta_rounding := false) AS TABLE
WITH tagged AS (
    SELECT run, run_id, rank, ts_us, end_us,
           unnest(['all', kernel_type]
                  || if(kernel_type IN ('compute', 'communication'), ['comm_or_compute'], [])) AS interval_set
    FROM analysis_gpu_work(run_name, rank_no, include_last_step := include_last_step,
                            hta_rounding := hta_rounding, step_no := step_no)
),
ordered AS (
    SELECT *, max(end_us) OVER (
        PARTITION BY run_id, rank, interval_set ORDER BY ts_us, end_us
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered_until_us
    FROM tagged
),
islands AS (
    SELECT *, sum(CASE WHEN covered_until_us IS NULL OR ts_us > covered_until_us THEN 1 ELSE 0 END) OVER (
        PARTITION BY run_id, rank, interval_set ORDER BY ts_us, end_us
        ROWS UNBOUNDED PRECEDING) AS island
    FROM ordered
),
merged AS (
    SELECT run, run_id, rank, interval_set, min(ts_us) AS start_us, max(end_us) AS end_us
    FROM islands
    GROUP BY run, run_id, rank, interval_set, island
)
SELECT run, run_id, rank, interval_set, sum(end_us - start_us) AS busy_us,
       min(start_us) AS first_start_us, max(end_us) AS last_end_us
FROM merged
GROUP BY run, run_id, rank, interval_set;

-- Busy time of each interval set side by side, one row per rank.
CREATE OR REPLACE TEMP MACRO analysis_busy_per_rank(run_name, rank_no, include_last_step := false,
    step_no := NULL, hta_rounding := false) AS TABLE
SELECT run, rank,
       max(last_end_us) - min(first_start_us) AS kernel_us,
       sum(busy_us) FILTER (WHERE interval_set = 'all') AS gpu_busy_us,
       coalesce(sum(busy_us) FILTER (WHERE interval_set = 'compute'), 0) AS compute_us,
       coalesce(sum(busy_us) FILTER (WHERE interval_set = 'communication'), 0) AS communication_us,
       coalesce(sum(busy_us) FILTER (WHERE interval_set = 'comm_or_compute'), 0) AS comm_or_compute_us
FROM analysis_busy_by_set(run_name, rank_no, include_last_step := include_last_step,
    step_no := step_no, hta_rounding := hta_rounding)
GROUP BY run, rank;

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
WITH gaps AS (
    SELECT * FROM analysis_idle_gaps(run_name, rank_no, include_last_step := include_last_step,
        kernel_wait_us := kernel_wait_us, hta_rounding := hta_rounding)
),
grid AS (
    SELECT DISTINCT run, rank, stream, unnest(['host_wait', 'kernel_wait', 'other']) AS category
    FROM gaps
),
totals AS (
    SELECT grid.run, grid.rank, grid.stream, grid.category, coalesce(sum(gaps.idle_us), 0) AS idle_us
    FROM grid
    LEFT JOIN gaps USING (run, rank, stream, category)
    GROUP BY ALL
)
SELECT *, idle_us / nullif(sum(idle_us) OVER (PARTITION BY run, rank, stream), 0) AS ratio
FROM totals;
