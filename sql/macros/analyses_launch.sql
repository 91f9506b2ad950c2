-- Kernel and launch analyses: kernel breakdown, launch statistics, launch queue length,
-- frequent kernel sequences. Same scope arguments as analyses_gpu_time.sql.

-- Time per kernel name and its class, with the class total and share of GPU op time.
CREATE OR REPLACE TEMP MACRO analysis_kernel_breakdown(run_name, rank_no, include_last_step := false) AS TABLE
WITH per_kernel AS (
    SELECT run, rank, kernel_type, name, count(*) AS kernel_count, sum(dur_us) AS total_us,
           avg(dur_us) AS mean_us, max(dur_us) AS max_us
    FROM analysis_gpu_work(run_name, rank_no, include_last_step := include_last_step)
    GROUP BY run, rank, kernel_type, name
)
SELECT *,
       sum(total_us) OVER (PARTITION BY run, rank, kernel_type) AS type_total_us,
       100 * total_us / sum(total_us) OVER (PARTITION BY run, rank) AS share_pct,
       row_number() OVER (PARTITION BY run, rank, kernel_type ORDER BY total_us DESC, name) AS rank_in_type
FROM per_kernel;

-- One row per launch call and the GPU op it started (HTA: cudaLaunchKernel(ExC) and,
-- with include_memory, cudaMemcpyAsync / cudaMemsetAsync). launch_delay_us is the gap
-- from the end of the call to the op's start, clipped at zero as HTA does. run_id and
-- event_id name the op's event.
CREATE OR REPLACE TEMP MACRO analysis_launch_stats(run_name, rank_no, include_last_step := false,
    runtime_cutoff_us := 50, launch_delay_cutoff_us := 100, include_memory := true) AS TABLE
SELECT run, run_id, rank, event_id, correlation, launch_name, name AS kernel_name, stream,
       launch_ts_us, launch_dur_us AS cpu_us, dur_us AS gpu_us,
       greatest(ts_us - launch_end_us, 0) AS launch_delay_us,
       dur_us < launch_dur_us AS short_kernel,
       launch_dur_us > runtime_cutoff_us AS runtime_outlier,
       greatest(ts_us - launch_end_us, 0) > launch_delay_cutoff_us AS launch_delay_outlier
FROM analysis_gpu_work(run_name, rank_no, include_last_step := include_last_step)
WHERE is_launch_call
  AND (include_memory OR launch_name NOT SIMILAR TO '(cuda|hip)Mem(cpy|set).*');

-- Outstanding operations per stream: +1 when a launch call enqueues GPU work, -1 when the
-- work starts on the stream (HTA's definition). One row per change point. One ORDER BY over
-- all streams (faster than PARTITION BY): the running sum stays per stream because each
-- stream's changes add up to zero, and held_us stops at the stream's last change. Changes
-- of one sign at one time give the same values in any order.
CREATE OR REPLACE TEMP MACRO analysis_queue_series(run_name, rank_no, include_last_step := false) AS TABLE
WITH changes AS (
    SELECT run, run_id, rank, stream, unnest([launch_ts_us, ts_us]) AS ts_us, unnest([1, -1]) AS delta
    FROM analysis_gpu_work(run_name, rank_no, include_last_step := include_last_step)
    WHERE is_launch_call
)
SELECT run, run_id, rank, stream, ts_us,
       sum(delta) OVER w AS queue_length,
       if(lead(stream) OVER w = stream AND lead(rank) OVER w = rank AND lead(run_id) OVER w = run_id,
          lead(ts_us) OVER w - ts_us, NULL) AS held_us
FROM changes
WINDOW w AS (ORDER BY run_id, rank, stream, ts_us, delta DESC ROWS UNBOUNDED PRECEDING);

-- Queue length summary per stream. mean_queue_length averages the change points, as HTA's
-- describe() does; time_weighted_mean weights each value by how long it held.
-- blocked_us: time with max_queue_length or more outstanding (the CPU blocks on launch).
CREATE OR REPLACE TEMP MACRO analysis_queue_length(run_name, rank_no, include_last_step := false,
    max_queue_length := 1024) AS TABLE
SELECT any_value(run) AS run, rank, stream,
       count(*) AS change_points,
       max(queue_length) AS max_queue_length,
       avg(queue_length) AS mean_queue_length,
       sum(queue_length * held_us) / nullif(sum(held_us), 0) AS time_weighted_mean,
       coalesce(sum(held_us) FILTER (WHERE queue_length >= max_queue_length), 0) AS blocked_us
FROM analysis_queue_series(run_name, rank_no, include_last_step := include_last_step)
GROUP BY run_id, rank, stream;

-- Outermost CPU ops whose name contains operator_text (one nested in another match on
-- the same thread is left out, so a kernel is counted once). Sorted by start, longest first,
-- a match is nested when an earlier match on its thread ends at or after its end.
CREATE OR REPLACE TEMP MACRO analysis_operator_roots(run_name, rank_no, operator_text) AS TABLE
WITH matches AS (
    SELECT e.run_id, r.name AS run, e.rank, e.event_id, e.name, e.pid, e.tid, e.ts_us, e.end_us, e.dur_us
    FROM events AS e JOIN runs AS r USING (run_id)
    WHERE is_cpu_op_event(e.cat, e.name) AND e.ph = 'X' AND contains(e.name, operator_text)
      AND (run_name IS NULL OR r.name = run_name) AND (rank_no IS NULL OR e.rank = rank_no)
)
SELECT * FROM matches
QUALIFY coalesce(max(end_us) OVER (
    PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, end_us DESC, event_id
    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) < end_us, true);

-- Kernel name sequences launched under each root op (launch calls nested in it on its
-- thread), counted per rank like HTA's frequent CUDA kernel sequences.
CREATE OR REPLACE TEMP MACRO analysis_kernel_sequences(run_name, rank_no, operator_text,
    min_length := 3) AS TABLE
WITH roots AS (
    SELECT *, dense_rank() OVER (ORDER BY run_id, rank, pid, tid) AS thread_no,
           lead(ts_us) OVER (PARTITION BY run_id, rank, pid, tid ORDER BY ts_us) AS next_ts_us
    FROM analysis_operator_roots(run_name, rank_no, operator_text)
    WHERE end_us IS NOT NULL  -- an op without a duration holds no launch
),
-- GPU ops launched on a thread that has roots, by the thread's number
launches AS (
    SELECT t.thread_no, g.launch_ts_us, g.name AS kernel_name, g.ts_us AS kernel_ts_us, g.dur_us AS kernel_us
    FROM analysis_gpu_ops AS g
    JOIN runs AS r USING (run_id)
    JOIN (SELECT DISTINCT run_id, rank, pid, tid, thread_no FROM roots) AS t
      ON t.run_id = g.run_id AND t.rank = g.rank AND t.pid = g.launch_pid AND t.tid = g.launch_tid
    WHERE (run_name IS NULL OR r.name = run_name) AND (rank_no IS NULL OR g.rank = rank_no)
),
-- Roots on a thread never nest, so sorted by start they end in order too: a launch is under
-- the latest root started by then (while it lasts), and under an earlier one only when that
-- root overlaps the next (rare). Two sorted joins instead of every launch of the thread
-- against every root.
launched AS (
    SELECT op.run, op.rank, op.event_id AS op_event_id, op.name AS operator, op.dur_us AS op_us,
           g.kernel_name, g.kernel_ts_us, g.kernel_us
    FROM launches AS g
    ASOF JOIN roots AS op ON op.thread_no = g.thread_no AND g.launch_ts_us >= op.ts_us
    WHERE g.launch_ts_us <= op.end_us
    UNION ALL
    SELECT op.run, op.rank, op.event_id, op.name, op.dur_us, g.kernel_name, g.kernel_ts_us, g.kernel_us
    FROM roots AS op
    JOIN launches AS g
      ON g.thread_no = op.thread_no AND g.launch_ts_us >= op.next_ts_us AND g.launch_ts_us <= op.end_us
    WHERE op.next_ts_us <= op.end_us
),
per_op AS (
    SELECT run, rank, op_event_id, operator, any_value(op_us) AS op_us, count(*) AS kernel_count,
           string_agg(kernel_name, ' -> ' ORDER BY kernel_ts_us) AS kernel_sequence,
           sum(kernel_us) AS gpu_us
    FROM launched
    GROUP BY run, rank, op_event_id, operator
    HAVING count(*) >= min_length
)
SELECT run, rank, operator, kernel_sequence, any_value(kernel_count) AS kernel_count,
       count(*) AS occurrences, sum(gpu_us) AS gpu_us, sum(op_us) AS cpu_us
FROM per_op
GROUP BY run, rank, operator, kernel_sequence;
