-- The wi_edge_times statement of sql/whatif/15_graph.sql as it was at c1f5625, before issue
-- 32 replaced its sync_dependencies join (every wait return with every GPU node of its window
-- that ended before it) with a running arg_max per stream and an ASOF join.
-- tests/engine/test_result_digest.py runs it after `whatif`, on the same temp tables, and compares
-- its rows with the new statement's. Verbatim but for the table's name.
CREATE OR REPLACE TEMP TABLE old_wi_edge_times AS
WITH sync_dependencies AS (
    SELECT h.window_index, arg_max(g.node_id, g.start_us) AS src, r.node_id AS dst,
           arg_max(g.end_us, g.start_us) AS allowed_us
    FROM wi_nodes AS h
    JOIN wi_nodes AS r
        ON r.window_index = h.window_index AND r.kind = 'cpu' AND r.wait_end_us IS NOT NULL
       AND r.pid IS NOT DISTINCT FROM h.pid AND r.tid = h.tid AND r.start_us = h.sync_end_us
    JOIN wi_nodes AS g
        ON g.window_index = h.window_index AND g.kind = 'gpu' AND g.end_us <= h.sync_end_us
       AND (h.stream IS NULL OR g.stream = h.stream
            OR r.label ILIKE 'after %DeviceSynchronize' OR r.label = 'after cuCtxSynchronize')
    WHERE h.kind = 'cpu' AND h.ends_with_sync
    GROUP BY h.window_index, r.node_id, g.stream
),
queue AS (
    SELECT window_index, node_id AS dst,
           lag(node_id) OVER w AS src, lag(end_us) OVER w AS allowed_us
    FROM wi_nodes
    WINDOW w AS (PARTITION BY window_index, lane ORDER BY start_us, node_id)
),
all_edges AS (
    SELECT w.window_index, e.src, e.dst, e.effective_end_us AS allowed_us
    FROM edges AS e
    JOIN wi_windows AS w USING (run_id, rank, step)
    WHERE e.method = 'ctda'
    UNION ALL
    SELECT window_index, src, dst, allowed_us FROM queue WHERE src IS NOT NULL
    UNION ALL
    SELECT window_index, src, dst, allowed_us FROM sync_dependencies
),
-- A CPU node that ends in a blocking sync lets what follows it go from the sync's start: the
-- rest of the call is waiting, which the sync edges model (the GPU work's end), so a change
-- that shortens the GPU work shortens the wait.
timed AS (
    SELECT e.window_index, e.src, e.dst,
           CASE WHEN s.kind = 'cpu' AND s.ends_with_sync THEN least(e.allowed_us, s.sync_start_us)
                ELSE e.allowed_us END AS allowed_us
    FROM all_edges AS e
    JOIN wi_nodes AS s ON s.window_index = e.window_index AND s.node_id = e.src
)
SELECT e.window_index, s.seq AS src_seq, d.seq AS dst_seq, e.allowed_us,
       s.start_us AS src_start_us, s.lane AS src_lane, d.start_us AS dst_start_us, d.lane AS dst_lane,
       s.run_id, s.rank,
       -- the edge that let the node start last carries its measured slack; the others none
       row_number() OVER (PARTITION BY e.window_index, e.dst ORDER BY e.allowed_us DESC, e.src DESC) = 1
           AS binding
FROM timed AS e
JOIN wi_nodes AS s ON s.window_index = e.window_index AND s.node_id = e.src
JOIN wi_nodes AS d ON d.window_index = e.window_index AND d.node_id = e.dst;
