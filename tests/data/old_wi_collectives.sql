-- The wi_collectives statement of sql/whatif/20_collectives.sql as it was at aa51275, before issue 32
-- replaced its `annotated` join (every NCCL kernel without metadata with every nccl:/gloo:
-- annotation of its launch's thread) by positions from one ordered pass.
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_wi_collectives AS
WITH run_ranks AS (
    SELECT run_id, count(*) AS ranks FROM traces WHERE $run_id IS NULL OR run_id = $run_id GROUP BY ALL
),
described AS (
    SELECT run_id, rank, event_id, dur_us, wi_collective(args ->> 'Collective name') AS collective,
           TRY_CAST(args ->> 'In msg nelems' AS DOUBLE) * _wi_dtype_bytes(args ->> 'dtype') AS bytes,
           TRY_CAST(args ->> 'Group size' AS INTEGER) AS group_size, stream, ts_us, end_us
    FROM _wi_comm_kernels WHERE args ->> 'Collective name' IS NOT NULL
),
-- the kernels without metadata, with the runtime call that launched them
launches AS (
    SELECT k.run_id, k.rank, k.event_id, k.dur_us, k.stream, k.ts_us, k.end_us,
           launch.pid, launch.tid, launch.ts_us AS launch_ts_us, launch.end_us AS launch_end_us
    FROM _wi_comm_kernels AS k
    JOIN events AS launch
        ON launch.run_id = k.run_id AND launch.rank = k.rank AND launch.correlation = k.correlation
       AND is_runtime_category(launch.cat)
    WHERE k.args ->> 'Collective name' IS NULL
),
annotated AS (
    SELECT l.run_id, l.rank, l.event_id, l.dur_us,
           arg_max(wi_collective(a.name), a.ts_us) AS collective,
           arg_max(list_product(TRY_CAST(a.args -> '$."Input Dims"[0]' AS DOUBLE[]))
                   * _wi_dtype_bytes(a.args ->> '$."Input type"[0]'), a.ts_us) AS bytes,
           any_value(r.ranks) AS group_size, l.stream, l.ts_us, l.end_us
    FROM launches AS l
    JOIN events AS a
        ON a.run_id = l.run_id AND a.rank = l.rank AND a.pid = l.pid AND a.tid = l.tid
       AND a.cat = 'user_annotation' AND regexp_matches(a.name, '^(nccl|gloo):')
       AND a.ts_us <= l.launch_ts_us AND a.end_us >= l.launch_end_us
    JOIN run_ranks AS r ON r.run_id = l.run_id
    GROUP BY l.run_id, l.rank, l.event_id, l.dur_us, l.stream, l.ts_us, l.end_us
)
SELECT * FROM described WHERE bytes > 0 AND group_size >= 1
UNION ALL
SELECT * FROM annotated WHERE bytes > 0 AND group_size >= 1;
