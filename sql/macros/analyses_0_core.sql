-- Building blocks of the trace analyses (docs/analyses.md): GPU work with its launch call,
-- kernel class, step and the rank's analysis scope. Temporary, defined on every connection.

-- Steps as their ProfilerStep annotations span them, for the HTA-parity analyses (HTA's
-- iterations are the annotations). The `steps` table itself partitions the timeline for the
-- critical path (each step runs to the next one's start; sql/ingest/steps.sql).
CREATE OR REPLACE TEMP VIEW analysis_step_spans AS
SELECT s.run_id, s.rank, s.step, s.name, s.start_us,
       coalesce(a.end_us, s.end_us) AS end_us, coalesce(a.end_us, s.end_us) - s.start_us AS dur_us,
       s.whole_trace, s.event_id
FROM steps AS s
LEFT JOIN events AS a ON a.run_id = s.run_id AND a.rank = s.rank AND a.event_id = s.event_id;

-- HTA's kernel classes: NCCL kernels communicate, memcpy/memset/DMA move memory, the rest computes.
CREATE OR REPLACE TEMP MACRO analysis_kernel_type(kernel_name, cat) AS
    CASE
        -- the prefix test spares the regex on the other (most) names
        WHEN starts_with(kernel_name, 'nccl') AND regexp_matches(kernel_name, '^nccl.*Kernel') THEN 'communication'
        WHEN cat IN ('gpu_memcpy', 'gpu_memset', 'Memcpy', 'Memset')
          OR starts_with(kernel_name, 'Memcpy') OR starts_with(kernel_name, 'Memset')
          OR starts_with(kernel_name, 'dma') THEN 'memory'
        ELSE 'compute'
    END;

-- Calls that enqueue GPU work (HTA's list plus cuLaunchKernel and the HIP names).
CREATE OR REPLACE TEMP MACRO analysis_is_launch_call(call_name) AS
    call_name IN ('cudaLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernel', 'cuLaunchKernelEx',
                  'cudaMemcpyAsync', 'cudaMemsetAsync', 'hipLaunchKernel', 'hipExtModuleLaunchKernel',
                  'hipMemcpyAsync', 'hipMemsetAsync', 'hipMemcpyWithStream',
                  'runFunction - job_prep_and_submit_for_execution');

-- Amount HTA moves a timestamp: in traces with fractional timestamps (ns_resolution, nccl)
-- it parses them as float64 (epoch microseconds keep only quarter-microsecond digits),
-- then rounds starts up and ends down to whole microseconds. Shifts from the exact
-- file value (ts_raw) to HTA's, in DECIMAL so the fraction survives (via BIGINT: DOUBLE -> DECIMAL loses digits).
CREATE OR REPLACE TEMP MACRO analysis_hta_start_shift_us(ts_raw) AS
    CAST(CAST(ceil(ts_raw::DOUBLE) AS BIGINT) - ts_raw AS DOUBLE);
CREATE OR REPLACE TEMP MACRO analysis_hta_end_shift_us(ts_raw, dur_us) AS
    CAST(CAST(floor(ts_raw::DOUBLE + dur_us) AS BIGINT)
         - (ts_raw + CAST(dur_us AS DECIMAL(38, 6))) AS DOUBLE);

-- Every GPU op that occupies a stream, with its launch call (NULL when it was launched
-- before profiling began; is_launch_call: one that enqueues work, analysis_is_launch_call)
-- and kernel class; only the ops of kernel_class unless NULL.
-- hta_* columns carry HTA's rounded times. The launch call is the CPU-side event sharing the
-- op's correlation; a driver call can repeat the id, and the runtime call (then the earliest)
-- wins. Ops join every CPU event of their correlation before that pick: deduplicating the few
-- matches is cheaper than deduplicating all CPU calls.
CREATE OR REPLACE TEMP MACRO analysis_gpu_ops_of(kernel_class) AS TABLE
WITH ops AS (
    SELECT run_id, rank, event_id, name, cat, stream, correlation, ts_us, dur_us, end_us, ts_raw,
           analysis_kernel_type(name, cat) AS kernel_type
    FROM events
    WHERE is_gpu_work(cat) AND ph = 'X' AND dur_us IS NOT NULL AND stream >= 0
      AND (kernel_class IS NULL OR analysis_kernel_type(name, cat) = kernel_class)
),
calls AS (
    SELECT run_id, rank, correlation, event_id, name, cat, pid, tid, ts_us, dur_us, end_us, ts_raw,
           analysis_is_launch_call(name) AS is_launch_call
    FROM events
    WHERE correlation IS NOT NULL AND stream IS NULL AND ph = 'X' AND dur_us IS NOT NULL
),
linked AS (
    SELECT g.*,
           c.event_id AS launch_event_id, c.name AS launch_name, c.pid AS launch_pid, c.tid AS launch_tid,
           c.ts_us AS launch_ts_us, c.dur_us AS launch_dur_us, c.end_us AS launch_end_us,
           c.ts_raw AS launch_ts_raw, c.is_launch_call
    FROM ops AS g
    LEFT JOIN calls AS c USING (run_id, rank, correlation)
    QUALIFY row_number() OVER (
        PARTITION BY g.run_id, g.rank, g.event_id ORDER BY c.cat = 'cuda_runtime' DESC, c.ts_us, c.event_id) = 1
)
SELECT
    g.run_id, g.rank, g.event_id, g.name, g.cat, g.stream, g.correlation,
    g.ts_us, g.dur_us, g.end_us, g.kernel_type,
    g.launch_event_id, g.launch_name, g.launch_pid, g.launch_tid,
    g.launch_ts_us, g.launch_dur_us, g.launch_end_us, g.is_launch_call,
    -- rounded to 1 ps: the DOUBLE sum leaves 1e-11 noise that would flip equal-time comparisons
    round(g.ts_us + if(t.time_resolution = 'ns', analysis_hta_start_shift_us(g.ts_raw), 0), 6) AS hta_ts_us,
    round(g.end_us + if(t.time_resolution = 'ns',
                        analysis_hta_end_shift_us(g.ts_raw, g.dur_us), 0), 6) AS hta_end_us,
    round(g.launch_ts_us + if(t.time_resolution = 'ns', analysis_hta_start_shift_us(g.launch_ts_raw), 0), 6)
        AS hta_launch_ts_us
FROM linked AS g
JOIN traces AS t USING (run_id, rank);

CREATE OR REPLACE TEMP VIEW analysis_gpu_ops AS SELECT * FROM analysis_gpu_ops_of(NULL);

-- Latest launch time a rank's analyses take in. With two or more steps HTA drops the last
-- one (the profiler often stops inside it): GPU work counts when its launch call started
-- before the last step began, or, with include_last_step, by the end of that step.
-- NULL (no cut) for traces with fewer than two steps.
CREATE OR REPLACE TEMP MACRO analysis_scope(include_last_step) AS TABLE
SELECT run_id, rank,
       if(any_value(include_last_step), max(end_us), max(start_us)) AS launch_cutoff_us
FROM analysis_step_spans
WHERE NOT whole_trace
GROUP BY run_id, rank
HAVING count(*) >= 2;

-- Launch times that belong to step step_no per rank: a launch belongs to the latest step
-- started at or before it, while that step lasts. No rows when step_no is NULL.
CREATE OR REPLACE TEMP MACRO analysis_step_launches(step_no) AS TABLE
SELECT s.run_id, s.rank, s.start_us AS from_us,
       least(s.end_us, (SELECT min(n.start_us) FROM analysis_step_spans AS n
                        WHERE n.run_id = s.run_id AND n.rank = s.rank AND NOT n.whole_trace
                          AND n.start_us > s.start_us)) AS until_us
FROM analysis_step_spans AS s
WHERE NOT s.whole_trace AND s.step = step_no;

-- The GPU ops a rank-level analysis reads: selected runs and ranks, inside the scope, and
-- with step_no only the work launched in that step (docs/analyses.md).
-- hta_rounding swaps in HTA's rounded times (for parity checks; exact times are right).
CREATE OR REPLACE TEMP MACRO analysis_gpu_work(run_name, rank_no, include_last_step := false,
                                               hta_rounding := false, step_no := NULL) AS TABLE
SELECT r.name AS run,
       g.* REPLACE (
           if(hta_rounding, g.hta_ts_us, g.ts_us) AS ts_us,
           if(hta_rounding, g.hta_end_us, g.end_us) AS end_us,
           if(hta_rounding, g.hta_launch_ts_us, g.launch_ts_us) AS launch_ts_us)
FROM analysis_gpu_ops AS g
JOIN runs AS r USING (run_id)
LEFT JOIN analysis_scope(include_last_step) AS cut USING (run_id, rank)
LEFT JOIN analysis_step_launches(step_no) AS s USING (run_id, rank)
WHERE (run_name IS NULL OR r.name = run_name)
  AND (rank_no IS NULL OR g.rank = rank_no)
  AND (cut.launch_cutoff_us IS NULL
       OR g.launch_ts_us < cut.launch_cutoff_us
       OR (include_last_step AND g.launch_ts_us = cut.launch_cutoff_us))
  AND (step_no IS NULL OR (g.launch_ts_us >= s.from_us AND g.launch_ts_us < s.until_us));
