-- Step and run level analyses: stragglers, duration percentiles, step-time trend, run diff,
-- and the collectives view (NCCL metadata and bus bandwidth).

-- The allowed straggler measures; the report's `measure` text is compared to these, never run.
CREATE OR REPLACE TEMP MACRO analysis_straggler_measures() AS ['step_us', 'annotation_us'];

-- One value per rank: mean step time, or mean duration of the annotation (or CPU op) named
-- annotation_name. An unknown measure raises an error naming the allowed ones.
CREATE OR REPLACE TEMP MACRO analysis_rank_measure(run_name, measure_name, annotation_name) AS TABLE
WITH checked AS (
    SELECT CASE WHEN list_contains(analysis_straggler_measures(), measure_name) THEN measure_name
                ELSE error('measure must be one of step_us, annotation_us; got ' || coalesce(measure_name, 'NULL'))
           END AS measure
),
step_values AS (
    SELECT run_id, rank, avg(dur_us) AS value_us, count(*) AS samples
    FROM analysis_step_spans GROUP BY run_id, rank
),
annotation_values AS (
    SELECT run_id, rank, avg(dur_us) AS value_us, count(*) AS samples
    FROM events
    WHERE name = annotation_name AND ph = 'X' AND stream IS NULL AND dur_us IS NOT NULL
    GROUP BY run_id, rank
)
SELECT r.name AS run, v.run_id, v.rank, checked.measure AS measure, v.value_us, v.samples
FROM checked
CROSS JOIN (SELECT 'step_us' AS measure, * FROM step_values
            UNION ALL SELECT 'annotation_us', * FROM annotation_values) AS v
JOIN runs AS r USING (run_id)
WHERE v.measure = checked.measure AND (run_name IS NULL OR r.name = run_name);

-- z-score of each rank's measure against all ranks of its run (population stddev: the
-- ranks are the whole population). NULL z when every rank has the same value.
CREATE OR REPLACE TEMP MACRO analysis_stragglers(run_name, measure_name := 'step_us', annotation_name := NULL,
    z_threshold := 2.0) AS TABLE
WITH scored AS (
    SELECT *, avg(value_us) OVER run_ranks AS run_mean_us, stddev_pop(value_us) OVER run_ranks AS run_stddev_us
    FROM analysis_rank_measure(run_name, measure_name, annotation_name)
    WINDOW run_ranks AS (PARTITION BY run_id)
)
SELECT run, rank, measure, value_us, samples, run_mean_us, run_stddev_us,
       (value_us - run_mean_us) / nullif(run_stddev_us, 0) AS z_score,
       coalesce(abs((value_us - run_mean_us) / nullif(run_stddev_us, 0)) > z_threshold, false) AS straggler
FROM scored;

-- p50/p95/p99 (linear interpolation, as numpy) of complete-event durations per name and rank.
CREATE OR REPLACE TEMP MACRO analysis_percentiles(run_name, rank_no, category := NULL, name_pattern := NULL) AS TABLE
WITH durations AS (
    SELECT r.name AS run, e.rank, e.cat, e.name, e.dur_us
    FROM events AS e JOIN runs AS r USING (run_id)
    WHERE e.ph = 'X' AND e.dur_us IS NOT NULL
      AND (run_name IS NULL OR r.name = run_name) AND (rank_no IS NULL OR e.rank = rank_no)
      -- a category by its file name or its modern one (cpu_op finds 1.8-1.9's Operator rows too)
      AND (category IS NULL OR e.cat = category OR kineto_category(e.cat, e.name) = category)
      AND (name_pattern IS NULL OR e.name LIKE name_pattern)
)
SELECT run, rank, cat, name, count(*) AS event_count,
       quantile_cont(dur_us, 0.5) AS p50_us, quantile_cont(dur_us, 0.95) AS p95_us,
       quantile_cont(dur_us, 0.99) AS p99_us, avg(dur_us) AS mean_us, max(dur_us) AS max_us
FROM durations
GROUP BY run, rank, cat, name;

-- Step time per bucket of bucket_steps consecutive step numbers (from the run's first step),
-- over every selected rank: mean, sample stddev and coefficient of variation.
CREATE OR REPLACE TEMP MACRO analysis_step_trend(run_name, rank_no, bucket_steps := 10) AS TABLE
WITH numbered AS (
    SELECT r.name AS run, s.*, (s.step - min(s.step) OVER (PARTITION BY s.run_id)) // bucket_steps AS bucket
    FROM analysis_step_spans AS s JOIN runs AS r USING (run_id)
    WHERE (run_name IS NULL OR r.name = run_name) AND (rank_no IS NULL OR s.rank = rank_no)
)
SELECT run, bucket, min(step) AS first_step, max(step) AS last_step, count(*) AS step_count,
       avg(dur_us) AS mean_step_us, stddev_samp(dur_us) AS stddev_step_us,
       stddev_samp(dur_us) / nullif(avg(dur_us), 0) AS cv
FROM numbered
GROUP BY run, bucket;

-- Every timed event of a run with its device side and step: a CPU event belongs to the
-- step it starts in, a GPU op to the step its launch call starts in (as HTA's iterations).
CREATE OR REPLACE TEMP MACRO analysis_events_by_step(run_name) AS TABLE
WITH step_spans AS (SELECT * FROM analysis_step_spans WHERE NOT whole_trace),
cpu AS (
    SELECT e.run_id, e.rank, e.name, e.dur_us, 'cpu' AS device,
           CASE WHEN e.ts_us < s.end_us THEN s.step END AS step
    FROM events AS e
    ASOF LEFT JOIN step_spans AS s ON s.run_id = e.run_id AND s.rank = e.rank AND e.ts_us >= s.start_us
    WHERE e.ph = 'X' AND e.stream IS NULL AND e.dur_us IS NOT NULL AND e.cat IS NOT NULL AND e.cat <> 'Trace'
),
gpu AS (
    SELECT g.run_id, g.rank, g.name, g.dur_us, 'gpu' AS device,
           CASE WHEN g.launch_ts_us < s.end_us THEN s.step END AS step
    FROM analysis_gpu_ops AS g
    ASOF LEFT JOIN step_spans AS s ON s.run_id = g.run_id AND s.rank = g.rank AND g.launch_ts_us >= s.start_us
)
SELECT r.name AS run, x.* FROM (SELECT * FROM cpu UNION ALL SELECT * FROM gpu) AS x
JOIN runs AS r USING (run_id)
WHERE r.name = run_name;

-- The same events as analysis_events_by_step without their step: no launch-call join and no
-- step lookup, for the many questions that take whole runs.
CREATE OR REPLACE TEMP MACRO analysis_timed_events(run_name) AS TABLE
SELECT r.name AS run, e.run_id, e.rank, e.name, e.dur_us, if(e.stream IS NULL, 'cpu', 'gpu') AS device
FROM events AS e
JOIN runs AS r USING (run_id)
WHERE r.name = run_name AND e.ph = 'X' AND e.dur_us IS NOT NULL
  AND ((e.stream IS NULL AND e.cat IS NOT NULL AND e.cat <> 'Trace')
       OR (is_gpu_work(e.cat) AND e.stream >= 0));  -- analysis_gpu_ops' ops

-- Count and total time per op/kernel name in two runs (optionally one rank, one step each).
-- A side with no step reads analysis_timed_events: the planner drops the branch the bound
-- parameters rule out, so the step lookup is only paid for when a step is asked for.
-- device: 'all', 'cpu' or 'gpu'. change: added, removed, more, fewer or same (by count).
CREATE OR REPLACE TEMP MACRO analysis_run_diff(run_a, run_b, rank_no := NULL, step_a := NULL, step_b := NULL,
    device := 'all') AS TABLE
WITH checked AS (
    SELECT CASE WHEN device IN ('all', 'cpu', 'gpu') THEN device
                ELSE error('device must be one of all, cpu, gpu; got ' || coalesce(device, 'NULL')) END AS device
),
-- columns qualified: a bare `device` would read the macro's parameter
picked AS (
    SELECT 'a' AS side, t.rank, t.name, t.dur_us, t.device FROM analysis_timed_events(run_a) AS t WHERE step_a IS NULL
    UNION ALL
    SELECT 'a', t.rank, t.name, t.dur_us, t.device FROM analysis_events_by_step(run_a) AS t WHERE t.step = step_a
    UNION ALL
    SELECT 'b', t.rank, t.name, t.dur_us, t.device FROM analysis_timed_events(run_b) AS t WHERE step_b IS NULL
    UNION ALL
    SELECT 'b', t.rank, t.name, t.dur_us, t.device FROM analysis_events_by_step(run_b) AS t WHERE t.step = step_b
),
totals AS (
    SELECT p.name,
           count(*) FILTER (WHERE side = 'a') AS count_a, count(*) FILTER (WHERE side = 'b') AS count_b,
           coalesce(sum(dur_us) FILTER (WHERE side = 'a'), 0) AS total_us_a,
           coalesce(sum(dur_us) FILTER (WHERE side = 'b'), 0) AS total_us_b
    FROM picked AS p CROSS JOIN checked
    WHERE (rank_no IS NULL OR p.rank = rank_no) AND (checked.device = 'all' OR p.device = checked.device)
    GROUP BY p.name
)
SELECT name, count_a, count_b, total_us_a, total_us_b,
       count_b - count_a AS diff_count, total_us_b - total_us_a AS diff_us,
       CASE WHEN count_a = 0 THEN 'added' WHEN count_b = 0 THEN 'removed'
            WHEN count_b > count_a THEN 'more' WHEN count_b < count_a THEN 'fewer' ELSE 'same' END AS change
FROM totals;

-- Bytes per element of the dtype names record_param_comms writes (c10 scalar type names).
CREATE OR REPLACE TEMP MACRO analysis_dtype_bytes(dtype) AS
    CASE lower(dtype)
        WHEN 'double' THEN 8 WHEN 'long' THEN 8 WHEN 'complexfloat' THEN 8 WHEN 'complexdouble' THEN 16
        WHEN 'float' THEN 4 WHEN 'int' THEN 4
        WHEN 'half' THEN 2 WHEN 'bfloat16' THEN 2 WHEN 'short' THEN 2
        WHEN 'byte' THEN 1 WHEN 'char' THEN 1 WHEN 'bool' THEN 1
        ELSE CASE WHEN lower(dtype) LIKE 'float8%' THEN 1 END
    END;

-- nccl-tests bus bandwidth factor: what each rank's links carry relative to the message.
CREATE OR REPLACE TEMP MACRO analysis_busbw_factor(collective, group_size) AS
    CASE
        WHEN group_size IS NULL OR group_size < 1 THEN NULL
        WHEN replace(lower(collective), '_', '') IN ('allreduce', 'allreducecoalesced')
            THEN 2.0 * (group_size - 1) / group_size
        WHEN replace(lower(collective), '_', '') IN ('allgather', 'allgatherbase', 'allgatherintotensorcoalesced',
                                                    'reducescatter', 'reducescatterbase', 'reducescattertensorcoalesced',
                                                    'alltoall', 'alltoallbase', 'alltoallv')
            THEN 1.0 * (group_size - 1) / group_size
        ELSE 1.0
    END;

-- One row per communication kernel with its collective's metadata: from the kernel's own
-- args (2024+ traces), else from the record_param_comms op enclosing its launch call.
-- msg_bytes = the larger of input and output elements times the dtype size (nccl-tests'
-- size S); algbw = S / kernel time; busbw = algbw * analysis_busbw_factor. GB/s = 1e9 B/s.
CREATE OR REPLACE TEMP VIEW analysis_collectives AS
WITH comm_kernels AS (
    SELECT * FROM analysis_gpu_ops_of('communication')
),
comms_ops AS (
    SELECT run_id, rank, pid, tid, ts_us, end_us, args
    FROM events WHERE name = 'record_param_comms' AND ph = 'X'
),
linked AS (
    SELECT k.*, e.args AS kernel_args, op.args AS op_args
    FROM comm_kernels AS k
    JOIN events AS e USING (run_id, rank, event_id)
    LEFT JOIN comms_ops AS op
      ON op.run_id = k.run_id AND op.rank = k.rank AND op.pid = k.launch_pid AND op.tid = k.launch_tid
     AND k.launch_ts_us BETWEEN op.ts_us AND op.end_us
    QUALIFY row_number() OVER (PARTITION BY k.run_id, k.rank, k.event_id ORDER BY op.ts_us DESC NULLS LAST) = 1
),
described AS (
    SELECT *, if(kernel_args ->> 'Collective name' IS NOT NULL, kernel_args, op_args) AS meta,
           if(kernel_args ->> 'Collective name' IS NOT NULL, 'kernel', 'record_param_comms') AS meta_source
    FROM linked
),
sized AS (
    SELECT *, greatest(TRY_CAST(meta ->> 'In msg nelems' AS BIGINT), TRY_CAST(meta ->> 'Out msg nelems' AS BIGINT))
              * analysis_dtype_bytes(meta ->> 'dtype') AS msg_bytes,
           TRY_CAST(meta ->> 'Group size' AS INTEGER) AS group_size
    FROM described
)
SELECT r.name AS run, s.run_id, s.rank, s.event_id, s.name AS kernel_name, s.stream, s.ts_us, s.dur_us,
       if(s.meta ->> 'Collective name' IS NULL, NULL, s.meta_source) AS meta_source,
       s.meta ->> 'Collective name' AS collective, s.meta ->> 'dtype' AS dtype,
       TRY_CAST(s.meta ->> 'In msg nelems' AS BIGINT) AS in_nelems,
       TRY_CAST(s.meta ->> 'Out msg nelems' AS BIGINT) AS out_nelems,
       s.group_size,
       coalesce(s.meta ->> 'Process Group Name', s.meta ->> 'Process Group ID') AS process_group,
       s.meta ->> 'Process Group Description' AS process_group_desc,
       s.meta ->> 'Process Group Ranks' AS process_group_ranks,
       s.msg_bytes,
       s.msg_bytes / nullif(s.dur_us, 0) / 1e3 AS algbw_gbps,
       s.msg_bytes / nullif(s.dur_us, 0) / 1e3 * analysis_busbw_factor(s.meta ->> 'Collective name', s.group_size)
           AS busbw_gbps
FROM sized AS s JOIN runs AS r USING (run_id);
