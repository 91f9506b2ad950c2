-- reads: runs, analysis_windows, cp_window_extent, cp_methods, cp_nodes, cp_wait_ends,
--        cp_method_edges, cp_gpu_node_events, cp_gpu_in_window, cp_stream_waits, cp_event_time,
--        cp_counted, cp_node_events
-- makes: _cp_analysed_runs(run_id)
-- makes: cp_changed_windows(run_id, rank, step)
-- makes: _cp_queued_idle(run_id, rank, step, node_id, idle_from_us, idle_to_us)
-- writes: nodes, edges, critical_path, path_events, analysis_windows
-- param: run_id INTEGER
-- param: queue_idle_min_us DOUBLE
-- Stage 7: replace earlier results of the analysed runs and methods, then store the new ones.

-- An analysis replaces the previous one of its (run, method) whole: annotation windows are
-- numbered 1..N like steps, so deleting only the new windows' (run, rank, step) would keep
-- the rows of windows the new mode does not have. A window that changed (another
-- name or extent) also takes the rows of the methods not re-analysed that were built on it.
CREATE OR REPLACE TEMP TABLE _cp_analysed_runs AS
SELECT run_id FROM runs WHERE $run_id IS NULL OR run_id = $run_id;

CREATE OR REPLACE TEMP TABLE cp_changed_windows AS
SELECT run_id, rank, step FROM (
    SELECT run_id, rank, step, name, start_us, end_us FROM analysis_windows
    WHERE run_id IN (SELECT run_id FROM _cp_analysed_runs)
    EXCEPT
    SELECT run_id, rank, step, name, start_us, end_us FROM cp_window_extent
);

DELETE FROM nodes WHERE (run_id IN (SELECT run_id FROM _cp_analysed_runs) AND method IN (SELECT method FROM cp_methods))
    OR (run_id, rank, step) IN (SELECT run_id, rank, step FROM cp_changed_windows);
DELETE FROM edges WHERE (run_id IN (SELECT run_id FROM _cp_analysed_runs) AND method IN (SELECT method FROM cp_methods))
    OR (run_id, rank, step) IN (SELECT run_id, rank, step FROM cp_changed_windows);
DELETE FROM critical_path WHERE (run_id IN (SELECT run_id FROM _cp_analysed_runs) AND method IN (SELECT method FROM cp_methods))
    OR (run_id, rank, step) IN (SELECT run_id, rank, step FROM cp_changed_windows);
DELETE FROM path_events WHERE (run_id IN (SELECT run_id FROM _cp_analysed_runs) AND method IN (SELECT method FROM cp_methods))
    OR (run_id, rank, step) IN (SELECT run_id, rank, step FROM cp_changed_windows);
DELETE FROM analysis_windows WHERE run_id IN (SELECT run_id FROM _cp_analysed_runs);

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

-- Device ops that sat queued on an idle stream longer than $queue_idle_min_us with no wait
-- found for them: the device idled with work queued, for a cause not in the trace.
CREATE OR REPLACE TEMP TABLE _cp_queued_idle AS
SELECT e.run_id, e.rank, e.step, e.node_id,
       greatest(g.prev_end_on_stream, g.launch_enqueued_us) AS idle_from_us, g.ts_us AS idle_to_us
FROM cp_gpu_node_events AS e
JOIN cp_gpu_in_window AS g USING (run_id, rank, event_id)
WHERE g.ts_us - greatest(g.prev_end_on_stream, g.launch_enqueued_us) > $queue_idle_min_us
  AND NOT EXISTS (SELECT 1 FROM cp_stream_waits AS w
                  WHERE w.run_id = e.run_id AND w.rank = e.rank AND w.target_event_id = e.event_id);

INSERT INTO critical_path (run_id, rank, step, method, seq, node_id, counted_start_us, counted_end_us,
                           counted_us, kind, edge_type, gap_before_us, gap_kind, node_rank,
                           queued_gap_us, queued_idle_us)
WITH work AS (
    SELECT method, run_id, rank, step, node_id, sum(self_us) AS counted_us
    FROM cp_event_time GROUP BY ALL
),
rows AS (
    SELECT c.*, coalesce(w.counted_us, 0) AS work_us,
           coalesce(lag(c.counted_end_us) OVER p, c.window_start_us) AS gap_start_us,
           CASE WHEN c.seq = 1 THEN 'slack_before'
                WHEN lag(c.kind) OVER p = 'cpu' AND c.kind = 'gpu' AND lag(c.edge_to_next) OVER p = 'call'
                    THEN 'launch_delay'
                ELSE 'between_nodes' END AS gap_kind
    FROM cp_counted AS c
    LEFT JOIN work AS w USING (method, run_id, rank, step, node_id)
    WINDOW p AS (PARTITION BY c.method, c.run_id, c.rank, c.step ORDER BY c.seq)
),
-- a queued op's idle interval split at the counted window's start: before it is gap, after it
-- idle inside the node (the node's ops run on one stream, so none of them runs meanwhile)
queued AS (
    SELECT r.method, r.run_id, r.rank, r.step, r.seq,
           sum(greatest(0, least(q.idle_to_us, r.counted_start_us) - greatest(q.idle_from_us, r.gap_start_us)))
               AS queued_gap_us,
           sum(greatest(0, least(q.idle_to_us, r.counted_end_us) - greatest(q.idle_from_us, r.counted_start_us)))
               AS queued_idle_us
    FROM rows AS r
    JOIN _cp_queued_idle AS q USING (run_id, rank, step, node_id)
    WHERE r.kind = 'gpu'
    GROUP BY ALL
)
SELECT r.run_id, r.rank, r.step, r.method, r.seq, r.node_id, r.counted_start_us, r.counted_end_us,
       r.work_us, r.kind, r.edge_to_next, r.counted_start_us - r.gap_start_us, r.gap_kind, r.rank,
       least(coalesce(q.queued_gap_us, 0), r.counted_start_us - r.gap_start_us),
       greatest(0, least(coalesce(q.queued_idle_us, 0), r.counted_end_us - r.counted_start_us - r.work_us))
FROM rows AS r
LEFT JOIN queued AS q USING (method, run_id, rank, step, seq);

INSERT INTO path_events
SELECT run_id, rank, step, method, node_id, event_id, name, cat, self_us, inclusive_us, rank
FROM cp_event_time
WHERE inclusive_us > 0;
