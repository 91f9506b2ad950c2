-- reads: runs, events, traces, steps
-- makes: cr_runs(run_id)
-- makes: _cr_comm_events(run_id, rank, event_id, name, pid, tid, ts_us, end_us, args, is_call,
--                       outside_calls)
-- makes: cr_calls(run_id, rank, event_id, call_name, call_peer, pid, tid, ts_us, end_us, meta_name,
--                 meta_nelems, meta_dtype, dims_nelems, dims_dtype, meta_pg, meta_ranks)
-- makes: cr_kernels(run_id, rank, event_id, name, ts_us, end_us, args, launch_pid, launch_tid,
--                   launch_ts_us, call_event_id)
-- makes: _cr_gloo(run_id, rank, event_id, name, ts_us, end_us, args, key, nth, call_event_id)
-- makes: _cr_raw_instances(run_id, rank, cpu_event_id, enqueue_us, start_us, end_us, executed_on,
--                         exec_event_id, name, nelems, dtype, pg_name, pg_ranks, peer)
-- makes: _cr_pg_config(run_id, rank, pg_name, pg_desc, ranks)
-- makes: cr_instances(run_id, rank, step, pg, seq, name, nelems, dtype, bytes, group_ranks,
--                     enqueue_us, start_us, end_us, executed_on, cpu_event_id, exec_event_id,
--                     on_channel)
-- param: run_id INTEGER
-- Cross-rank stage 1: every collective call of every rank of the analysed runs, with where
-- it executed, its process group, its order in the group (seq) and its message size.
--
-- A call is an outermost c10d::* or record_param_comms op on a CPU thread. It executes as
-- the NCCL kernel(s) its launch calls started, else as the gloo:* annotation of a gloo worker
-- thread (the k-th of that collective on the rank, in order), else as the call itself. NCCL
-- kernels and gloo executions with no call in the trace are instances of their own.
--
-- A call and its execution are one instance: FSDP's c10d::_allgather_base_ executes as
-- gloo:all_gather and its c10d::_reduce_scatter_base_ as gloo:all_reduce. Point-to-point
-- send/recv (c10d::send, c10d::recv_) is matched per channel, not per group: its group key
-- is '<pg>:<sender>-><receiver>', with the peer from the call's Concrete Inputs.

CREATE OR REPLACE TEMP TABLE cr_runs AS
SELECT run_id FROM runs WHERE $run_id IS NULL OR run_id = $run_id;

-- CPU-side collective events, outermost or not, on their OS thread. A record_param_comms
-- whose Collective name is 'wait' is a Work.wait() (a blocking NCCL send or recv writes one
-- after its call): it waits for an earlier call to complete, it is no collective of its own.
CREATE OR REPLACE TEMP TABLE _cr_comm_events AS
WITH comm_events AS (
    SELECT run_id, rank, event_id, name, pid, tid, ts_us, end_us, args,
           (name = 'record_param_comms' AND args ->> 'Collective name' IS DISTINCT FROM 'wait')
               OR starts_with(name, 'c10d::') AS is_call
    FROM events
    WHERE run_id IN (SELECT run_id FROM cr_runs) AND ph = 'X' AND dur_us IS NOT NULL
      AND NOT is_device_category(cat)
      AND (name = 'record_param_comms' OR starts_with(name, 'c10d::')
           OR starts_with(name, 'nccl:') OR starts_with(name, 'gloo:'))
)
SELECT *,
       ts_us >= coalesce(max(end_us) FILTER (WHERE is_call) OVER (
           PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, end_us DESC, event_id
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), '-infinity'::DOUBLE) AS outside_calls
FROM comm_events;

-- Calls with what their nested events say: collective name, size, dtype, group.
-- A call's members are the collective events of its thread that start at or after its start
-- and end by its end. A join on the thread with that range would compare every call with
-- every collective event of the thread (quadratic in a thread's collectives). Instead, as
-- for the nodes' python frames (cp_node_events, sql/analysis/60_counted.sql), one ordered
-- pass over each thread's events and call bounds gives every event its position on the
-- thread (in start order) and every bound the count of events before it: events starting
-- before the call's start (ties: the bound first) and at or before its end (ties: the bound
-- last). The call's candidates are the positions between, whose end is then checked. No
-- event ends before it starts (ingest rejects a negative duration), and outermost calls do
-- not overlap, so each event is a candidate of the calls that hold its start only: n log n
-- in the thread's collective events.
CREATE OR REPLACE TEMP TABLE cr_calls AS
WITH calls AS MATERIALIZED (
    SELECT *, row_number() OVER () AS call_row FROM _cr_comm_events WHERE is_call AND outside_calls
),
positions AS MATERIALIZED (
    SELECT *, (sum(is_member) OVER (PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, bound_order, event_id
                                    ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, pid, tid, ts_us, 1 AS bound_order, 1 AS is_member, event_id, end_us, args,
               NULL::BIGINT AS call_row, NULL::DOUBLE AS call_ts_us, NULL::DOUBLE AS call_end_us
        FROM _cr_comm_events
        UNION ALL
        SELECT run_id, rank, pid, tid, ts_us, 0, 0, NULL, NULL, NULL, call_row, ts_us, end_us FROM calls
        UNION ALL
        SELECT run_id, rank, pid, tid, end_us, 2, 0, NULL, NULL, NULL, call_row, ts_us, end_us FROM calls
    )
),
call_positions AS (
    SELECT call_row, run_id, rank, pid, tid, call_ts_us, call_end_us,
           unnest(range(max(position) FILTER (WHERE bound_order = 0) + 1,
                        max(position) FILTER (WHERE bound_order = 2) + 1)) AS position
    FROM positions
    WHERE is_member = 0
    GROUP BY call_row, run_id, rank, pid, tid, call_ts_us, call_end_us
),
-- (the check goes with the positions' join, on the values the positions carry: with the calls
-- joined in, the planner may compare them with the events directly)
members AS (
    SELECT p.call_row, m.ts_us, m.end_us, m.event_id, m.args
    FROM call_positions AS p
    JOIN positions AS m USING (run_id, rank, pid, tid, position)
    WHERE m.is_member = 1 AND m.ts_us >= p.call_ts_us AND m.end_us <= p.call_end_us
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
    JOIN members AS m USING (call_row)
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

-- NCCL kernels, with the call that launched them when the launch is in the trace: the calls
-- of the launch's thread that hold its start. Found by positions as the calls' members are:
-- the launches of each thread in start order, and each call's bounds counting the launches
-- before them; a call's launches are the positions between (a join on the thread with the
-- range would compare every kernel with every call of its thread).
CREATE OR REPLACE TEMP TABLE cr_kernels AS
WITH kernels AS MATERIALIZED (
    SELECT g.run_id, g.rank, g.event_id, g.name, g.ts_us, g.end_us, g.args,
           l.pid AS launch_pid, l.tid AS launch_tid, l.ts_us AS launch_ts_us,
           row_number() OVER () AS kernel_row
    FROM events AS g
    LEFT JOIN events AS l
        ON l.run_id = g.run_id AND l.rank = g.rank AND l.correlation = g.correlation
       AND l.ph = 'X' AND is_runtime_category(l.cat)
    WHERE g.run_id IN (SELECT run_id FROM cr_runs) AND g.ph = 'X' AND is_gpu_work(g.cat)
      AND is_collective_kernel(g.name)
),
positions AS MATERIALIZED (
    SELECT *, (sum(is_launch) OVER (PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, bound_order, kernel_row
                                    ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, launch_pid AS pid, launch_tid AS tid, launch_ts_us AS ts_us, 1 AS bound_order,
               1 AS is_launch, kernel_row, NULL::BIGINT AS call_event_id
        FROM kernels
        UNION ALL
        SELECT run_id, rank, pid, tid, ts_us, 0, 0, NULL, event_id FROM cr_calls
        UNION ALL
        SELECT run_id, rank, pid, tid, end_us, 2, 0, NULL, event_id FROM cr_calls
    )
),
call_positions AS (
    SELECT run_id, rank, pid, tid, call_event_id,
           unnest(range(max(position) FILTER (WHERE bound_order = 0) + 1,
                        max(position) FILTER (WHERE bound_order = 2) + 1)) AS position
    FROM positions
    WHERE is_launch = 0
    GROUP BY run_id, rank, pid, tid, call_event_id
),
launched AS (
    SELECT l.kernel_row, p.run_id, p.rank, p.pid, p.tid, p.call_event_id
    FROM call_positions AS p
    JOIN positions AS l USING (run_id, rank, pid, tid, position)
    WHERE l.is_launch = 1
)
SELECT k.* EXCLUDE (kernel_row), c.event_id AS call_event_id
FROM kernels AS k
LEFT JOIN (SELECT l.kernel_row, c.* FROM launched AS l
           JOIN cr_calls AS c
               ON c.run_id = l.run_id AND c.rank = l.rank AND c.event_id = l.call_event_id
              AND c.pid = l.pid AND c.tid = l.tid) AS c
    ON c.kernel_row = k.kernel_row AND c.run_id = k.run_id AND c.rank = k.rank AND c.pid = k.launch_pid
   AND c.tid = k.launch_tid AND k.launch_ts_us BETWEEN c.ts_us AND c.end_us;

-- gloo executions, paired with the rank's calls of the same collective that launched no
-- kernel: gloo:* annotations of a worker thread (outside any call), in order; and the
-- gloo:send / gloo:recv of a point-to-point call, which run on the calling thread from the
-- post (inside or right after the call) to the completion: each with the latest call of its
-- kind on its thread that started by its start. A second execution of one point-to-point call
-- (a trace that holds the events twice) is dropped: paired in order, it shifted every later
-- pair of the rank by one. A call's execution key is the annotation gloo writes for it: the
-- *_base_ tensor variants run as the plain collective, and gloo runs a reduce-scatter of one
-- tensor as an all-reduce (FSDP's gradient sync).
CREATE OR REPLACE TEMP TABLE _cr_gloo AS
WITH execs AS (
    SELECT run_id, rank, event_id, name, pid, tid, ts_us, end_us, args,
           collective_key(name) AS key, collective_key(name) IN ('send', 'recv') AS p2p,
           row_number() OVER (PARTITION BY run_id, rank, collective_key(name) ORDER BY ts_us, event_id) AS nth
    FROM _cr_comm_events
    WHERE starts_with(name, 'gloo:') AND (outside_calls OR collective_key(name) IN ('send', 'recv'))
),
call_keys AS (
    SELECT *, CASE collective_key(coalesce(meta_name, call_name))
                  WHEN 'allgatherbase' THEN 'allgather'
                  WHEN 'reducescatterbase' THEN 'allreduce'
                  ELSE collective_key(coalesce(meta_name, call_name)) END AS key
    FROM cr_calls
),
calls AS (
    SELECT run_id, rank, event_id, pid, tid, ts_us, key,
           row_number() OVER (PARTITION BY run_id, rank, key ORDER BY ts_us, event_id) AS nth
    FROM call_keys AS c
    WHERE NOT EXISTS (SELECT 1 FROM cr_kernels AS k
                      WHERE k.run_id = c.run_id AND k.rank = c.rank AND k.call_event_id = c.event_id)
),
p2p_execs AS (
    SELECT x.*, c.event_id AS call_event_id,
           row_number() OVER (PARTITION BY x.run_id, x.rank, c.event_id ORDER BY x.ts_us, x.event_id) AS of_call
    FROM (SELECT * FROM execs WHERE p2p) AS x
    ASOF LEFT JOIN (SELECT * FROM calls WHERE key IN ('send', 'recv')) AS c
        ON c.run_id = x.run_id AND c.rank = x.rank AND c.pid = x.pid AND c.tid = x.tid AND c.key = x.key
       AND x.ts_us >= c.ts_us
)
SELECT x.* EXCLUDE (pid, tid, p2p), c.event_id AS call_event_id
FROM (SELECT * FROM execs WHERE NOT p2p) AS x
LEFT JOIN calls AS c
    ON c.run_id = x.run_id AND c.rank = x.rank AND c.key = x.key AND c.nth = x.nth AND c.ts_us <= x.ts_us
UNION ALL
SELECT * EXCLUDE (pid, tid, p2p, of_call)
FROM p2p_execs
WHERE call_event_id IS NULL OR of_call = 1;

-- One row per collective instance, in the rank's own clock.
CREATE OR REPLACE TEMP TABLE _cr_raw_instances AS
WITH by_kernel AS (
    SELECT run_id, rank, call_event_id, min(ts_us) AS start_us, max(end_us) AS end_us,
           arg_min(event_id, ts_us) AS exec_event_id, arg_min(name, ts_us) AS kernel_name,
           arg_min(args, ts_us) AS kernel_args
    FROM cr_kernels WHERE call_event_id IS NOT NULL
    GROUP BY ALL
)
SELECT c.run_id, c.rank, c.event_id AS cpu_event_id, c.ts_us AS enqueue_us,
       -- a point-to-point call arrives when it posts (the call's start; a recv may block in
       -- the call itself) and completes when its gloo:send / gloo:recv does
       CASE WHEN c.call_peer IS NOT NULL AND k.exec_event_id IS NULL THEN c.ts_us
            ELSE coalesce(k.start_us, g.ts_us, c.ts_us) END AS start_us,
       CASE WHEN c.call_peer IS NOT NULL AND k.exec_event_id IS NULL THEN greatest(c.end_us, g.end_us)
            ELSE coalesce(k.end_us, g.end_us, c.end_us) END AS end_us,
       CASE WHEN k.exec_event_id IS NOT NULL THEN 'nccl_kernel'
            WHEN g.event_id IS NOT NULL AND c.call_peer IS NULL THEN 'gloo_worker' ELSE 'cpu_call' END AS executed_on,
       coalesce(k.exec_event_id, g.event_id, c.event_id) AS exec_event_id,
       clean_collective_name(coalesce(c.meta_name, k.kernel_args ->> 'Collective name', c.call_name)) AS name,
       coalesce(c.meta_nelems, c.dims_nelems, TRY_CAST(g.args -> 'Input Dims' -> 0 ->> 0 AS BIGINT)) AS nelems,
       coalesce(c.meta_dtype, c.dims_dtype, g.args -> 'Input type' ->> 0) AS dtype,
       coalesce(c.meta_pg, k.kernel_args ->> 'Process Group Name') AS pg_name,
       c.meta_ranks AS pg_ranks, c.call_peer AS peer
FROM cr_calls AS c
LEFT JOIN by_kernel AS k ON k.run_id = c.run_id AND k.rank = c.rank AND k.call_event_id = c.event_id
LEFT JOIN _cr_gloo AS g ON g.run_id = c.run_id AND g.rank = c.rank AND g.call_event_id = c.event_id
UNION ALL
SELECT run_id, rank, NULL, NULL, ts_us, end_us, 'nccl_kernel', event_id,
       clean_collective_name(coalesce(args ->> 'Collective name', regexp_extract(name, '^nccl(?:Dev)?Kernel_([A-Za-z]+)', 1))),
       greatest(TRY_CAST(args ->> 'In msg nelems' AS BIGINT), TRY_CAST(args ->> 'Out msg nelems' AS BIGINT)),
       args ->> 'dtype', coalesce(args ->> 'Process Group Name', args ->> 'Process Group ID'),
       TRY_CAST(TRY_CAST(args ->> 'Process Group Ranks' AS JSON) AS INTEGER[]), NULL
FROM cr_kernels WHERE call_event_id IS NULL
UNION ALL
SELECT run_id, rank, NULL, NULL, ts_us, end_us, 'gloo_worker', event_id, clean_collective_name(name),
       TRY_CAST(args -> 'Input Dims' -> 0 ->> 0 AS BIGINT), args -> 'Input type' ->> 0, NULL, NULL, NULL
FROM _cr_gloo WHERE call_event_id IS NULL;

-- Process groups named in distributedInfo.pg_config (ranks as a list, or as its text).
CREATE OR REPLACE TEMP TABLE _cr_pg_config AS
WITH entries AS (
    SELECT run_id, rank, unnest(TRY_CAST(distributed_info -> 'pg_config' AS JSON[])) AS pg
    FROM traces WHERE run_id IN (SELECT run_id FROM cr_runs)
)
SELECT run_id, rank, pg ->> 'pg_name' AS pg_name, pg ->> 'pg_desc' AS pg_desc,
       coalesce(TRY_CAST(pg -> 'ranks' AS INTEGER[]), TRY_CAST(TRY_CAST(pg ->> 'ranks' AS JSON) AS INTEGER[])) AS ranks
FROM entries;

-- Group, order and step of every instance. A call that names no group belongs to the rank's
-- default group (pg_config's default_pg), else to 'default' spanning the run's ranks.
-- group_ranks keeps only the group's ranks that are in the run: those are the ones to match.
-- A send or recv whose peer is known belongs to its channel ('<pg>:<sender>-><receiver>',
-- global ranks; on_channel), whose sends 20_match.sql pairs with its recvs step by step (seq
-- here is the call's order on the channel; matching renumbers it by pair).
CREATE OR REPLACE TEMP TABLE cr_instances AS
WITH run_ranks AS (
    SELECT run_id, list(rank ORDER BY rank) AS ranks
    FROM traces WHERE run_id IN (SELECT run_id FROM cr_runs) GROUP BY run_id
),
default_pg AS (
    SELECT run_id, rank, any_value(pg_name) AS pg_name FROM _cr_pg_config WHERE pg_desc = 'default_pg' GROUP BY ALL
),
grouped AS (
    SELECT i.*, coalesce(i.pg_name, d.pg_name, 'default') AS pg,
           coalesce(i.pg_ranks, p.ranks, q.ranks, r.ranks) AS declared_ranks, r.ranks AS present_ranks
    FROM _cr_raw_instances AS i
    JOIN run_ranks AS r USING (run_id)
    LEFT JOIN default_pg AS d ON d.run_id = i.run_id AND d.rank = i.rank
    LEFT JOIN _cr_pg_config AS p ON p.run_id = i.run_id AND p.rank = i.rank AND p.pg_name = i.pg_name
    LEFT JOIN _cr_pg_config AS q ON q.run_id = i.run_id AND q.rank = i.rank AND q.pg_name = d.pg_name
        AND i.pg_name IS NULL
),
peers AS (
    SELECT *, coalesce(list_extract(declared_ranks, peer + 1), peer) AS peer_rank FROM grouped
),
directed AS (
    SELECT *,
           CASE collective_key(name) WHEN 'send' THEN rank WHEN 'recv' THEN peer_rank END AS sender,
           CASE collective_key(name) WHEN 'send' THEN peer_rank WHEN 'recv' THEN rank END AS receiver
    FROM peers
),
channels AS (
    SELECT * REPLACE (
               CASE WHEN sender IS NULL OR receiver IS NULL THEN pg ELSE pg || ':' || sender || '->' || receiver END AS pg,
               CASE WHEN sender IS NULL OR receiver IS NULL THEN declared_ranks ELSE [sender, receiver] END AS declared_ranks)
    FROM directed
)
SELECT g.run_id, g.rank, s.step, g.pg,
       row_number() OVER (PARTITION BY g.run_id, g.pg, g.rank
                          ORDER BY coalesce(g.enqueue_us, g.start_us), g.start_us, g.exec_event_id) AS seq,
       g.name, g.nelems, g.dtype, g.nelems * analysis_dtype_bytes(g.dtype) AS bytes,
       list_sort(list_filter(g.declared_ranks, lambda x: list_contains(g.present_ranks, x))) AS group_ranks,
       g.enqueue_us, g.start_us, g.end_us, g.executed_on, g.cpu_event_id, g.exec_event_id,
       g.sender IS NOT NULL AND g.receiver IS NOT NULL AS on_channel
FROM channels AS g
ASOF LEFT JOIN steps AS s
    ON s.run_id = g.run_id AND s.rank = g.rank AND coalesce(g.enqueue_us, g.start_us) >= s.start_us;
