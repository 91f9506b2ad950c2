-- reads: wi_shrink, wi_window_tails, wi_nodes, wi_edge_times, wi_queue_waits, wi_windows
-- makes: _wi_removed(run_id, rank, lane, t, removed_us)
-- makes: wi_replay_nodes(window_index, seq, node_id, kind, label, carry_in, stream, start_us,
--                        end_us, duration_us, lead_us, has_predecessor, ends_with_sync,
--                        next_on_lane_seq)
-- makes: wi_replay_edges(window_index, src_seq, dst_seq, offset_us, slack_us)
-- makes: wi_window_gates(window_index, gated_us)
-- makes: wi_replay_windows(window_index, run_id, rank, step, window_us, cpu_end_us,
--                          device_ends_step, reported, tail_seq, gated_us, tail_us)
-- param: drop_syncs BOOLEAN
-- The replay's inputs under the scenario: every node of the selected windows (15_graph.sql)
-- with its duration, and every edge with the measured slack it keeps. Times are relative to
-- the window start. A lane's removed time between two instants is C(t2) - C(t1), where C(t)
-- is the time removed on the lane before t (wi_shrink, piecewise linear); only lanes where the
-- scenario removes time have points (elsewhere C = 0).

-- C(t) at every instant the replay needs.
CREATE OR REPLACE TEMP TABLE _wi_removed AS
WITH changed AS (
    SELECT DISTINCT run_id, rank, lane FROM wi_shrink
),
all_points AS (
    SELECT run_id, rank, lane, start_us AS t FROM wi_nodes
    UNION ALL SELECT run_id, rank, lane, end_us FROM wi_nodes
    UNION ALL SELECT run_id, rank, lane, window_start_us FROM wi_nodes
    UNION ALL SELECT run_id, rank, src_lane, allowed_us FROM wi_edge_times
    UNION ALL SELECT run_id, rank, dst_lane, allowed_us FROM wi_edge_times
    UNION ALL SELECT n.run_id, n.rank, t.lane, t.window_end_us
          FROM wi_window_tails AS t JOIN wi_nodes AS n ON n.window_index = t.window_index AND n.seq = 0
),
points AS (
    SELECT DISTINCT p.* FROM all_points AS p SEMI JOIN changed AS c USING (run_id, rank, lane)
)
SELECT p.run_id, p.rank, p.lane, p.t,
       coalesce(s.removed_before_us + s.removed_rate * least(greatest(p.t - s.from_us, 0), s.to_us - s.from_us),
                0.0) AS removed_us
FROM points AS p
ASOF LEFT JOIN wi_shrink AS s
    ON s.run_id = p.run_id AND s.rank = p.rank AND s.lane = p.lane AND s.from_us <= p.t;

-- Nodes: duration under the scenario; nodes with no predecessor keep their lead from the
-- window start (less what was removed on their lane before them). Carry-in has none here: it
-- repeats earlier windows' work, replayed there (a collective's coupling included), and ends
-- where that work ends in the replay (warehouse/whatif/graph.py, StreamCarry: lead_us counts
-- only where no earlier replayed window ran work on the stream, as in a rank's first). The
-- engine's edges between carry-in nodes (each carried-in NCCL kernel is a node,
-- sql/analysis/30_gpu_nodes.sql) would time that work a second time, less what the change
-- removed from it.
CREATE OR REPLACE TEMP TABLE wi_replay_nodes AS
SELECT n.window_index, n.seq, n.node_id, n.kind, n.label, n.carry_in, n.stream,
       n.start_us - n.window_start_us AS start_us, n.end_us - n.window_start_us AS end_us,
       (n.end_us - n.start_us) - (coalesce(ce.removed_us, 0.0) - coalesce(cs.removed_us, 0.0)) AS duration_us,
       (n.start_us - n.window_start_us) - (coalesce(cs.removed_us, 0.0) - coalesce(cw.removed_us, 0.0)) AS lead_us,
       NOT n.carry_in AND EXISTS (SELECT 1 FROM wi_edge_times AS e
                                  WHERE e.window_index = n.window_index AND e.dst_seq = n.seq) AS has_predecessor,
       -- a node that ends in a sync is shown ending where the next node on its thread starts
       n.ends_with_sync,
       lead(n.seq) OVER (PARTITION BY n.window_index, n.lane ORDER BY n.start_us, n.node_id) AS next_on_lane_seq
FROM wi_nodes AS n
LEFT JOIN _wi_removed AS cs ON cs.run_id = n.run_id AND cs.rank = n.rank AND cs.lane = n.lane AND cs.t = n.start_us
LEFT JOIN _wi_removed AS ce ON ce.run_id = n.run_id AND ce.rank = n.rank AND ce.lane = n.lane AND ce.t = n.end_us
LEFT JOIN _wi_removed AS cw ON cw.run_id = n.run_id AND cw.rank = n.rank AND cw.lane = n.lane
    AND cw.t = n.window_start_us;

-- Edges: when the source lets the destination go (offset from the source's start), and the
-- slack the binding edge keeps (launch latency, Python overhead), both less removed time.
CREATE OR REPLACE TEMP TABLE wi_replay_edges AS
SELECT e.window_index, e.src_seq, e.dst_seq,
       (e.allowed_us - e.src_start_us) - (coalesce(ca.removed_us, 0.0) - coalesce(cs.removed_us, 0.0)) AS offset_us,
       -- another edge that let the node go later than it started (recorded overlap, clock
       -- skew) keeps that negative slack too, or the unchanged replay would start it late
       CASE WHEN e.binding OR e.dst_start_us < e.allowed_us
            THEN (e.dst_start_us - e.allowed_us) - (coalesce(cd.removed_us, 0.0) - coalesce(cg.removed_us, 0.0))
            ELSE 0.0 END AS slack_us
FROM wi_edge_times AS e
LEFT JOIN _wi_removed AS cs ON cs.run_id = e.run_id AND cs.rank = e.rank AND cs.lane = e.src_lane AND cs.t = e.src_start_us
LEFT JOIN _wi_removed AS ca ON ca.run_id = e.run_id AND ca.rank = e.rank AND ca.lane = e.src_lane AND ca.t = e.allowed_us
LEFT JOIN _wi_removed AS cg ON cg.run_id = e.run_id AND cg.rank = e.rank AND cg.lane = e.dst_lane AND cg.t = e.allowed_us
LEFT JOIN _wi_removed AS cd ON cd.run_id = e.run_id AND cd.rank = e.rank AND cd.lane = e.dst_lane AND cd.t = e.dst_start_us
-- --drop-syncs: no CPU node waits for GPU work (an edge from a GPU node into a CPU node is a
-- blocking sync's, measured or inferred); the CPU goes on from the sync's start
WHERE NOT ($drop_syncs AND EXISTS (
    SELECT 1 FROM wi_nodes AS sn, wi_nodes AS dn
    WHERE sn.window_index = e.window_index AND sn.seq = e.src_seq AND sn.kind = 'gpu'
      AND dn.window_index = e.window_index AND dn.seq = e.dst_seq AND dn.kind = 'cpu'))
  -- nothing in the window holds carry-in (wi_replay_nodes above)
  AND NOT EXISTS (SELECT 1 FROM wi_nodes AS dn
                  WHERE dn.window_index = e.window_index AND dn.seq = e.dst_seq AND dn.carry_in);

-- Windows whose CPU side waited for launch-queue slots (wi_queue_waits) kept the GPU's pace:
-- each launch waited for an earlier kernel to finish, one completion per launch. The kernels
-- that freed the slots were launched earlier, often before the profiled steps (so the trace
-- holds none of them), and in a steady state they are like the window's own: such a window
-- lasts at least its measured length less the time the change removes from the GPU work it
-- launched (on its stream that loses the most).
CREATE OR REPLACE TEMP TABLE wi_window_gates AS
WITH gated AS (
    SELECT DISTINCT window_index, window_us FROM wi_queue_waits
),
removed AS (
    SELECT window_index, stream, sum((end_us - start_us) - duration_us) AS removed_us
    FROM wi_replay_nodes
    WHERE kind = 'gpu' AND NOT carry_in
    GROUP BY ALL
)
SELECT g.window_index, g.window_us - coalesce(max(r.removed_us), 0.0) AS gated_us
FROM gated AS g
LEFT JOIN removed AS r USING (window_index)
GROUP BY g.window_index, g.window_us;

-- Windows: the CPU tail after the last CPU node, less removed time on its lane.
CREATE OR REPLACE TEMP TABLE wi_replay_windows AS
SELECT w.window_index, w.run_id, w.rank, w.step, w.window_us, w.cpu_end_us - w.start_us AS cpu_end_us,
       w.device_ends_step, w.reported, t.tail_seq, q.gated_us,
       (t.window_end_us - t.node_end_us) - coalesce(ct.removed_us - cn.removed_us, 0.0) AS tail_us
FROM wi_windows AS w
LEFT JOIN wi_window_tails AS t USING (window_index)
LEFT JOIN wi_window_gates AS q USING (window_index)
LEFT JOIN wi_nodes AS n ON n.window_index = t.window_index AND n.seq = t.tail_seq
LEFT JOIN _wi_removed AS cn ON cn.run_id = n.run_id AND cn.rank = n.rank AND cn.lane = t.lane AND cn.t = t.node_end_us
LEFT JOIN _wi_removed AS ct ON ct.run_id = n.run_id AND ct.rank = n.rank AND ct.lane = t.lane
    AND ct.t = t.window_end_us;
