-- Stage 7: replace earlier results of the analysed runs and methods, then store the new ones.

-- An analysis replaces the previous one of its (run, method) whole: annotation windows are
-- numbered 1..N like steps, so deleting only the new windows' (run, rank, step) kept the rows
-- of windows the new mode does not have (issue 35 item 2). A window that changed (another
-- name or extent) also takes the rows of the methods not re-analysed that were built on it.
CREATE OR REPLACE TEMP TABLE cp_analysed_runs AS
SELECT run_id FROM runs WHERE $run_id IS NULL OR run_id = $run_id;

CREATE OR REPLACE TEMP TABLE cp_changed_windows AS
SELECT run_id, rank, step FROM (
    SELECT run_id, rank, step, name, start_us, end_us FROM analysis_windows
    WHERE run_id IN (SELECT run_id FROM cp_analysed_runs)
    EXCEPT
    SELECT run_id, rank, step, name, start_us, end_us FROM cp_window_extent
);

DELETE FROM nodes WHERE (run_id IN (SELECT run_id FROM cp_analysed_runs) AND method IN (SELECT method FROM cp_methods))
    OR (run_id, rank, step) IN (SELECT run_id, rank, step FROM cp_changed_windows);
DELETE FROM edges WHERE (run_id IN (SELECT run_id FROM cp_analysed_runs) AND method IN (SELECT method FROM cp_methods))
    OR (run_id, rank, step) IN (SELECT run_id, rank, step FROM cp_changed_windows);
DELETE FROM critical_path WHERE (run_id IN (SELECT run_id FROM cp_analysed_runs) AND method IN (SELECT method FROM cp_methods))
    OR (run_id, rank, step) IN (SELECT run_id, rank, step FROM cp_changed_windows);
DELETE FROM path_events WHERE (run_id IN (SELECT run_id FROM cp_analysed_runs) AND method IN (SELECT method FROM cp_methods))
    OR (run_id, rank, step) IN (SELECT run_id, rank, step FROM cp_changed_windows);
DELETE FROM analysis_windows WHERE run_id IN (SELECT run_id FROM cp_analysed_runs);

INSERT INTO analysis_windows
SELECT run_id, rank, step, name, start_us, end_us, e2e_end_us, e2e_end_us - start_us
FROM cp_window_extent;

INSERT INTO nodes
SELECT n.run_id, n.rank, n.step, m.method, n.node_id, n.kind, n.phase, n.stream, n.tid,
       n.start_us, n.end_us, coalesce(ev.event_count, 0), n.pid, n.carry_in, n.label, n.ends_with_sync,
       n.sync_start_us, n.sync_end_us, w.wait_end_us
FROM cp_nodes AS n
CROSS JOIN cp_methods AS m
LEFT JOIN (SELECT run_id, rank, step, node_id, count(*) AS event_count
           FROM cp_node_events(false) GROUP BY ALL) AS ev USING (run_id, rank, step, node_id)
LEFT JOIN cp_wait_ends AS w USING (run_id, rank, step, node_id);

INSERT INTO edges
SELECT run_id, rank, step, method, src, dst, type, inferred, effective_end_us
FROM cp_method_edges;

INSERT INTO critical_path
WITH work AS (
    SELECT method, run_id, rank, step, node_id, sum(self_us) AS counted_us
    FROM cp_event_time GROUP BY ALL
)
SELECT c.run_id, c.rank, c.step, c.method, c.seq, c.node_id, c.counted_start_us, c.counted_end_us,
       coalesce(w.counted_us, 0), c.kind, c.edge_to_next,
       c.counted_start_us - coalesce(lag(c.counted_end_us) OVER p, c.window_start_us),
       CASE WHEN c.seq = 1 THEN 'slack_before'
            WHEN lag(c.kind) OVER p = 'cpu' AND c.kind = 'gpu' AND lag(c.edge_to_next) OVER p = 'call'
                THEN 'launch_delay'
            ELSE 'between_nodes' END,
       c.rank
FROM cp_counted AS c
LEFT JOIN work AS w USING (method, run_id, rank, step, node_id)
WINDOW p AS (PARTITION BY c.method, c.run_id, c.rank, c.step ORDER BY c.seq);

INSERT INTO path_events
SELECT run_id, rank, step, method, node_id, event_id, name, cat, self_us, inclusive_us, rank
FROM cp_event_time
WHERE inclusive_us > 0;
