-- reads: cp_nodes, cp_gpu_split, cp_carry_ops, cp_wait_returns, cp_sync_events, cp_stream_waits,
--        cp_ops, cp_top_nodes, cp_comm_waits
-- makes: cp_gpu_node_events(run_id, rank, step, node_id, event_id, name, cat, ts_us, end_us)
-- makes: _cp_sync_waits(run_id, rank, step, waiter_node, call_name, copy_event_id, sync_start_us,
--                      sync_end_us, recorded, scope_stream, all_streams)
-- makes: cp_wait_ends(run_id, rank, step, node_id, wait_end_us)
-- makes: _cp_sync_edges(run_id, rank, step, src, dst, type, inferred, effective_end_us)
-- makes: _cp_comm_edges(run_id, rank, step, src, dst, type, inferred, effective_end_us)
-- makes: cp_edges(run_id, rank, step, src, dst, type, inferred, effective_end_us)
-- param: sync_tolerance_us DOUBLE
-- Stage 4: the device ops each GPU node holds, and the edges between nodes.

-- GPU nodes' device ops: the edges below find the nodes of a stream wait's ops and of a
-- blocking copy here. The events of every node, CPU ones too, are a macro of stage 6.
CREATE OR REPLACE TEMP TABLE cp_gpu_node_events AS
SELECT n.run_id, n.rank, n.step, n.node_id, g.event_id, g.name, g.cat, g.ts_us, g.end_us
FROM cp_nodes AS n
JOIN cp_gpu_split AS g USING (run_id, rank, step, cpu_node, stream, split_no)
WHERE n.kind = 'gpu' AND NOT n.carry_in
UNION ALL
SELECT n.run_id, n.rank, n.step, n.node_id, c.event_id, c.name, c.cat, c.ts_us, c.end_us
FROM cp_nodes AS n
JOIN cp_carry_ops AS c USING (run_id, rank, step, stream, split_no)
WHERE n.carry_in;

-- Every blocking sync, its scope, and the wait-return node that waited behind it.
CREATE OR REPLACE TEMP TABLE _cp_sync_waits AS
SELECT r.run_id, r.rank, r.step, n.node_id AS waiter_node, r.sync_name AS call_name,
       r.copy_gpu_event_id AS copy_event_id, r.sync_start_us, r.sync_end_us,
       se.correlation IS NOT NULL OR r.copy_gpu_event_id <> -1 AS recorded,
       CASE WHEN se.name = 'Stream Sync' THEN se.stream WHEN se.name = 'Event Sync' THEN se.wait_on_stream END
           AS scope_stream,
       r.sync_name ILIKE '%DeviceSynchronize' OR r.sync_name = 'cuCtxSynchronize'
           OR coalesce(se.name = 'Context Sync', false) AS all_streams
FROM cp_wait_returns AS r
JOIN cp_nodes AS n
    ON n.run_id = r.run_id AND n.rank = r.rank AND n.step = r.step AND n.kind = 'cpu' AND n.cpu_node = r.cpu_node
LEFT JOIN cp_sync_events AS se
    ON se.run_id = r.run_id AND se.rank = r.rank AND se.correlation = r.sync_correlation;

-- Where the wait ended for each wait-return node.
CREATE OR REPLACE TEMP TABLE cp_wait_ends AS
SELECT run_id, rank, step, waiter_node AS node_id, max(sync_end_us) AS wait_end_us
FROM _cp_sync_waits
GROUP BY ALL;

-- Sync edges: each blocking sync's waiter node depends on the latest GPU node it waited for
-- (one per stream where the sync waits for all streams or names one).
--
-- The GPU nodes that end while a sync waits (after it starts, by its return plus the
-- tolerance) are its candidates. A join on the step with that range would compare every sync
-- with every GPU node of the step (quadratic in a loop of .item() calls). Instead one
-- ordered pass over each step's GPU node ends and the syncs' bounds gives every node its
-- position in end order and every bound the count of nodes ending by it (ties: the node
-- first); a sync's candidates are the positions between its two bounds. A thread's syncs do
-- not overlap, so each node is a candidate of about one sync per thread: n log n in the
-- step's nodes and syncs.
CREATE OR REPLACE TEMP TABLE _cp_sync_edges AS
WITH sync_waits AS (
    SELECT row_number() OVER () AS wait_row, * FROM _cp_sync_waits
),
gpu_ends AS MATERIALIZED (
    SELECT *, (sum(is_node) OVER (PARTITION BY run_id, rank, step ORDER BY end_us, is_node DESC, node_id
                                  ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, step, end_us, 1 AS is_node, node_id, NULL::BIGINT AS wait_row, NULL::BOOLEAN AS upper
        FROM cp_nodes WHERE kind = 'gpu'
        UNION ALL
        SELECT run_id, rank, step, sync_start_us, 0, NULL, wait_row, false FROM sync_waits
        UNION ALL
        SELECT run_id, rank, step, sync_end_us + $sync_tolerance_us, 0, NULL, wait_row, true FROM sync_waits
    )
),
sync_positions AS (
    SELECT wait_row, run_id, rank, step, unnest(range(ended_before + 1, ended_by_return + 1)) AS position
    FROM (
        SELECT wait_row, run_id, rank, step,
               max(position) FILTER (WHERE NOT upper) AS ended_before,
               max(position) FILTER (WHERE upper) AS ended_by_return
        FROM gpu_ends WHERE is_node = 0
        GROUP BY ALL
    )
),
sync_candidates AS (
    SELECT sw.run_id, sw.rank, sw.step, g.node_id AS src, sw.waiter_node AS dst, NOT sw.recorded AS inferred,
           g.end_us AS src_end_us,
           row_number() OVER (
               PARTITION BY sw.run_id, sw.rank, sw.step, sw.waiter_node,
                            CASE WHEN sw.all_streams OR sw.scope_stream IS NOT NULL THEN g.stream END
               ORDER BY g.end_us DESC, g.node_id DESC) AS latest
    FROM sync_waits AS sw
    JOIN sync_positions AS c USING (wait_row)
    JOIN gpu_ends AS e ON e.run_id = c.run_id AND e.rank = c.rank AND e.step = c.step AND e.position = c.position
       AND e.is_node = 1
    JOIN cp_nodes AS g
        ON g.run_id = e.run_id AND g.rank = e.rank AND g.step = e.step AND g.node_id = e.node_id
       AND g.start_us < sw.sync_end_us
       AND (sw.scope_stream IS NULL OR g.stream = sw.scope_stream)
       AND (sw.copy_event_id = -1 OR EXISTS (
            SELECT 1 FROM cp_gpu_node_events AS m
            WHERE m.run_id = g.run_id AND m.rank = g.rank AND m.step = g.step AND m.node_id = g.node_id
              AND m.event_id = sw.copy_event_id))
)
SELECT run_id, rank, step, src, dst, 'sync' AS type, inferred, src_end_us AS effective_end_us
FROM sync_candidates WHERE latest = 1;

-- gloo edges: each worker thread's executions in order (a worker runs one at a time), the
-- collective call that handed each one over, and the waits for it.
CREATE OR REPLACE TEMP TABLE _cp_comm_edges AS
WITH comm_chain AS (
    SELECT run_id, rank, step, node_id AS dst,
           lag(node_id) OVER w AS src, lag(end_us) OVER w AS src_end_us
    FROM cp_nodes WHERE comm_event_id IS NOT NULL
    WINDOW w AS (PARTITION BY run_id, rank, step, pid, tid ORDER BY start_us, node_id)
),
comm_nodes AS (
    SELECT * FROM cp_nodes WHERE comm_event_id IS NOT NULL
),
-- The main thread hands the work over in a collective call (c10d::*, record_param_comms, at
-- any depth of a top-level event): the latest call of the rank that began by the execution's
-- start, by an ASOF join, is the call edge's source (its node), effective at the call's return.
collective_calls AS (
    SELECT o.run_id, o.rank, o.ts_us, o.end_us, n.step, n.node_id
    FROM cp_ops AS o
    JOIN cp_top_nodes AS t ON t.run_id = o.run_id AND t.rank = o.rank AND t.event_id = o.top_event_id
    JOIN cp_nodes AS n
        ON n.run_id = t.run_id AND n.rank = t.rank AND n.step = t.step AND n.kind = 'cpu' AND n.cpu_node = t.cpu_node
    WHERE NOT o.is_python AND (starts_with(o.name, 'c10d::') OR o.name = 'record_param_comms')
),
comm_calls AS (
    SELECT g.run_id, g.rank, g.step, c.node_id AS src, g.node_id AS dst, c.end_us AS call_end_us
    FROM comm_nodes AS g
    ASOF JOIN collective_calls AS c
        ON c.run_id = g.run_id AND c.rank = g.rank AND c.ts_us <= g.start_us
    WHERE c.step = g.step
),
-- ... and waits for it with nothing recorded (cp_comm_waits, stage 2): the node the thread
-- resumed with depends on the execution.
comm_waits AS (
    SELECT d.run_id, d.rank, d.step, g.node_id AS src, d.node_id AS dst, w.comm_end_us AS src_end_us
    FROM cp_comm_waits AS w
    JOIN cp_top_nodes AS t ON t.run_id = w.run_id AND t.rank = w.rank AND t.event_id = w.event_id
    JOIN cp_nodes AS d
        ON d.run_id = t.run_id AND d.rank = t.rank AND d.step = t.step AND d.kind = 'cpu' AND d.cpu_node = t.cpu_node
    JOIN comm_nodes AS g
        ON g.run_id = w.run_id AND g.rank = w.rank AND g.step = d.step AND g.comm_event_id = w.comm_event_id
)
SELECT run_id, rank, step, src, dst, 'sequential' AS type, false AS inferred, src_end_us AS effective_end_us
FROM comm_chain WHERE src IS NOT NULL
UNION ALL
-- per_thread keeps these: the hand-over and the wait are the collective's, not a thread switch
SELECT run_id, rank, step, src, dst, 'call', false, call_end_us FROM comm_calls
UNION ALL
SELECT run_id, rank, step, src, dst, 'sync', true, src_end_us FROM comm_waits;

-- Every edge: each CPU thread's and stream's order, launches, stream waits, and the sync and
-- gloo edges above.
CREATE OR REPLACE TEMP TABLE cp_edges AS
WITH cpu_chain AS (
    SELECT run_id, rank, step, node_id AS dst, tid,
           lag(node_id) OVER w AS src, lag(tid) OVER w AS src_tid, lag(end_us) OVER w AS src_end_us
    FROM cp_nodes WHERE kind = 'cpu' AND comm_event_id IS NULL
    WINDOW w AS (PARTITION BY run_id, rank, step ORDER BY start_us, node_id)
),
stream_chain AS (
    SELECT run_id, rank, step, node_id AS dst,
           lag(node_id) OVER w AS src, lag(end_us) OVER w AS src_end_us
    FROM cp_nodes WHERE kind = 'gpu'
    WINDOW w AS (PARTITION BY run_id, rank, step, stream ORDER BY start_us, node_id)
),
calls AS (
    SELECT c.run_id, c.rank, c.step, c.node_id AS src, n.node_id AS dst,
           arg_min(g.launch_enqueued_us, g.launch_start_us) AS first_launch_end_us
    FROM cp_gpu_split AS g
    JOIN cp_nodes AS n ON n.run_id = g.run_id AND n.rank = g.rank AND n.step = g.step AND n.kind = 'gpu'
        AND NOT n.carry_in AND n.cpu_node = g.cpu_node AND n.stream = g.stream AND n.split_no = g.split_no
    JOIN cp_nodes AS c ON c.run_id = g.run_id AND c.rank = g.rank AND c.step = g.step AND c.kind = 'cpu'
        AND c.cpu_node = g.cpu_node
    GROUP BY ALL
),
stream_waits AS (
    SELECT s.run_id, s.rank, s.step, s.node_id AS src, t.node_id AS dst, any_value(w.inferred) AS inferred,
           max(src_node.end_us) AS src_end_us
    FROM cp_stream_waits AS w
    JOIN cp_gpu_node_events AS s ON s.run_id = w.run_id AND s.rank = w.rank AND s.event_id = w.source_event_id
    JOIN cp_gpu_node_events AS t ON t.run_id = w.run_id AND t.rank = w.rank AND t.step = s.step
        AND t.event_id = w.target_event_id
    JOIN cp_nodes AS src_node ON src_node.run_id = s.run_id AND src_node.rank = s.rank
        AND src_node.step = s.step AND src_node.node_id = s.node_id
    GROUP BY ALL
),
typed AS (
    SELECT run_id, rank, step, src, dst,
           CASE WHEN src_tid = tid THEN 'sequential' ELSE 'cross_thread' END AS type,
           false AS inferred, src_end_us AS effective_end_us
    FROM cpu_chain WHERE src IS NOT NULL
    UNION ALL
    SELECT run_id, rank, step, src, dst, 'sequential', false, src_end_us FROM stream_chain WHERE src IS NOT NULL
    UNION ALL
    SELECT run_id, rank, step, src, dst, 'call', false, first_launch_end_us FROM calls
    UNION ALL
    SELECT run_id, rank, step, src, dst, 'sync', inferred, src_end_us FROM stream_waits
    UNION ALL
    SELECT * FROM _cp_sync_edges
    UNION ALL
    SELECT * FROM _cp_comm_edges
)
-- every edge must point forward in time (start, then id): the graph stays acyclic
SELECT DISTINCT e.*
FROM typed AS e
JOIN cp_nodes AS s ON s.run_id = e.run_id AND s.rank = e.rank AND s.step = e.step AND s.node_id = e.src
JOIN cp_nodes AS d ON d.run_id = e.run_id AND d.rank = e.rank AND d.step = e.step AND d.node_id = e.dst
WHERE s.start_us < d.start_us OR (s.start_us = d.start_us AND s.node_id < d.node_id);
