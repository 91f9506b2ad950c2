-- The cp_node_events macro of sql/analysis/60_counted.sql as it was at 341b77a, before issue
-- 32 replaced its python-frame range join on the thread (every CPU node compared with every
-- frame of its thread) with positions from one ordered pass. tests/engine/test_result_digest.py
-- makes it after `analyze`, beside the new macro on the same temp tables, and compares the
-- rows of both. Verbatim but for the macro's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP MACRO old_cp_node_events(counted_only) AS TABLE
WITH expanded AS (
    SELECT * FROM cp_nodes
    WHERE NOT counted_only
       OR (run_id, rank, step, node_id) IN (SELECT run_id, rank, step, node_id FROM _cp_counted_windows)
)
-- CPU nodes: their top-level events and everything nested in them that starts before the
-- node ends (a node holding a sync ends where the sync returned)
SELECT n.run_id, n.rank, n.step, n.node_id, o.event_id, o.name, o.cat, o.ts_us, o.end_us
FROM expanded AS n
JOIN cp_top_nodes AS t USING (run_id, rank, step, cpu_node)
JOIN cp_ops AS o ON o.run_id = t.run_id AND o.rank = t.rank AND o.top_event_id = t.event_id
WHERE n.kind = 'cpu' AND o.ts_us <= n.end_us
UNION ALL
-- wait-return nodes: the events of their top-level event that run after the wait
SELECT n.run_id, n.rank, n.step, n.node_id, o.event_id, o.name, o.cat, o.ts_us, o.end_us
FROM expanded AS n
JOIN cp_wait_returns AS r USING (run_id, rank, step, cpu_node)
JOIN cp_ops AS o ON o.run_id = r.run_id AND o.rank = r.rank AND o.top_event_id = r.top_event_id
WHERE n.kind = 'cpu' AND o.end_us >= n.start_us AND o.ts_us <= n.end_us
UNION ALL
-- CPU nodes: python frames that lie inside the node's span on its thread
SELECT n.run_id, n.rank, n.step, n.node_id, o.event_id, o.name, o.cat, o.ts_us, o.end_us
FROM expanded AS n
JOIN cp_ops AS o
    ON o.run_id = n.run_id AND o.rank = n.rank AND o.tid = n.tid AND o.pid = n.pid AND o.is_python
   AND o.ts_us >= n.start_us AND o.end_us <= n.end_us
WHERE n.kind = 'cpu'
UNION ALL
-- GPU nodes: their device ops
SELECT g.run_id, g.rank, g.step, g.node_id, g.event_id, g.name, g.cat, g.ts_us, g.end_us
FROM cp_gpu_node_events AS g
SEMI JOIN expanded AS n USING (run_id, rank, step, node_id);
