-- The cr_calls statement of sql/crossrank/10_instances.sql as it was at 4aa6593, before issue 32
-- replaced its `described` join (every outermost collective call with every collective event
-- of its thread) with positions from one ordered pass.
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_cr_calls AS
WITH calls AS (
    SELECT * FROM _cr_comm_events WHERE is_call AND outside_calls
),
described AS (
    SELECT c.run_id, c.rank, c.event_id, c.name AS call_name, c.pid, c.tid, c.ts_us, c.end_us,
           -- send(tensors, pg, dstRank, tag) / recv_(tensors, pg, srcRank, tag): the peer,
           -- a rank of the call's group
           CASE WHEN collective_key(c.name) IN ('send', 'recv')
                THEN TRY_CAST(c.args -> 'Concrete Inputs' ->> 2 AS INTEGER) END AS call_peer,
           m.ts_us AS meta_ts_us, m.event_id AS meta_event_id, m.args,
           -- elements of the first input: one tensor, or the sum over a TensorList
           coalesce(list_aggregate(TRY_CAST(m.args -> 'Input Dims' -> 0 AS BIGINT[]), 'product'),
                    list_sum(list_transform(TRY_CAST(m.args -> 'Input Dims' -> 0 AS BIGINT[][]),
                                            lambda d: list_aggregate(d, 'product'))))::BIGINT AS first_nelems,
           CASE WHEN analysis_dtype_bytes(m.args -> 'Input type' ->> 0) IS NOT NULL
                THEN m.args -> 'Input type' ->> 0 END AS first_dtype
    FROM calls AS c
    JOIN _cr_comm_events AS m
        ON m.run_id = c.run_id AND m.rank = c.rank AND m.pid = c.pid AND m.tid = c.tid
       AND m.ts_us >= c.ts_us AND m.end_us <= c.end_us
)
SELECT run_id, rank, event_id, call_name, call_peer, pid, tid, ts_us, end_us,
       arg_min(args ->> 'Collective name', (meta_ts_us, meta_event_id)) FILTER (WHERE args ->> 'Collective name' IS NOT NULL)
           AS meta_name,
       arg_min(greatest(TRY_CAST(args ->> 'In msg nelems' AS BIGINT), TRY_CAST(args ->> 'Out msg nelems' AS BIGINT)),
               (meta_ts_us, meta_event_id)) FILTER (WHERE args ->> 'In msg nelems' IS NOT NULL) AS meta_nelems,
       arg_min(args ->> 'dtype', (meta_ts_us, meta_event_id)) FILTER (WHERE args ->> 'dtype' IS NOT NULL) AS meta_dtype,
       arg_min(first_nelems, (meta_ts_us, meta_event_id)) FILTER (WHERE first_nelems > 0) AS dims_nelems,
       arg_min(first_dtype, (meta_ts_us, meta_event_id)) FILTER (WHERE first_dtype IS NOT NULL) AS dims_dtype,
       arg_min(coalesce(args ->> 'Process Group Name', args ->> 'Process Group ID'), (meta_ts_us, meta_event_id))
           FILTER (WHERE coalesce(args ->> 'Process Group Name', args ->> 'Process Group ID') IS NOT NULL) AS meta_pg,
       arg_min(TRY_CAST(TRY_CAST(args ->> 'Process Group Ranks' AS JSON) AS INTEGER[]), (meta_ts_us, meta_event_id))
           FILTER (WHERE args ->> 'Process Group Ranks' IS NOT NULL) AS meta_ranks
FROM described
GROUP BY run_id, rank, event_id, call_name, call_peer, pid, tid, ts_us, end_us;
