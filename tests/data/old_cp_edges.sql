-- The cp_edges statement of sql/analysis/40_edges.sql as it was at 24fb93e, before issue 32
-- replaced its sync_candidates range join (every sync compared with every GPU node of its
-- step) with positions from one ordered pass. tests/engine/test_result_digest.py runs it after
-- `analyze`, on the same temp tables, and compares its rows with the new statement's.
-- Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_cp_edges AS
WITH cpu_chain AS (
    SELECT run_id, rank, step, node_id AS dst, tid,
           lag(node_id) OVER w AS src, lag(tid) OVER w AS src_tid, lag(end_us) OVER w AS src_end_us
    FROM cp_nodes WHERE kind = 'cpu'
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
sync_candidates AS (
    SELECT sw.run_id, sw.rank, sw.step, g.node_id AS src, sw.waiter_node AS dst, NOT sw.recorded AS inferred,
           g.end_us AS src_end_us,
           row_number() OVER (
               PARTITION BY sw.run_id, sw.rank, sw.step, sw.waiter_node,
                            CASE WHEN sw.all_streams OR sw.scope_stream IS NOT NULL THEN g.stream END
               ORDER BY g.end_us DESC, g.node_id DESC) AS latest
    FROM _cp_sync_waits AS sw
    JOIN cp_nodes AS g
        ON g.run_id = sw.run_id AND g.rank = sw.rank AND g.step = sw.step AND g.kind = 'gpu'
       AND g.end_us > sw.sync_start_us AND g.end_us <= sw.sync_end_us + $sync_tolerance_us
       AND g.start_us < sw.sync_end_us
       AND (sw.scope_stream IS NULL OR g.stream = sw.scope_stream)
       AND (sw.copy_event_id = -1 OR EXISTS (
            SELECT 1 FROM cp_gpu_node_events AS m
            WHERE m.run_id = g.run_id AND m.rank = g.rank AND m.step = g.step AND m.node_id = g.node_id
              AND m.event_id = sw.copy_event_id))
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
    SELECT run_id, rank, step, src, dst, 'sync', inferred, src_end_us FROM sync_candidates WHERE latest = 1
)
-- every edge must point forward in time (start, then id): the graph stays acyclic
SELECT DISTINCT e.*
FROM typed AS e
JOIN cp_nodes AS s ON s.run_id = e.run_id AND s.rank = e.rank AND s.step = e.step AND s.node_id = e.src
JOIN cp_nodes AS d ON d.run_id = e.run_id AND d.rank = e.rank AND d.step = e.step AND d.node_id = e.dst
WHERE s.start_us < d.start_us OR (s.start_us = d.start_us AND s.node_id < d.node_id);
