-- reads: nodes, wi_windows, edges, events
-- makes: wi_nodes(window_index, run_id, rank, step, node_id, kind, label, carry_in, pid, tid,
--                 stream, ends_with_sync, sync_start_us, sync_end_us, wait_end_us, lane, start_us,
--                 end_us, window_start_us, window_end_us, seq)
-- makes: wi_edge_times(window_index, src_seq, dst_seq, allowed_us, src_start_us, src_lane,
--                      dst_start_us, dst_lane, run_id, rank, binding)
-- makes: wi_queue_waits(window_index, window_us, run_id, rank, event_id, lane, ts_us, end_us)
-- makes: wi_window_tails(window_index, tail_seq, node_end_us, lane, window_end_us)
-- param: queue_wait_us DOUBLE
-- param: queue_share DOUBLE
-- The replay's graph, the same for every scenario of one what-if: every node of the selected
-- windows, every edge with the instant it let its destination start in the measurement, the
-- launch-queue waits, and where each window's CPU side ends. Scenario-dependent durations:
-- 40_graph.sql.

CREATE OR REPLACE TEMP TABLE wi_nodes AS
SELECT w.window_index, n.run_id, n.rank, n.step, n.node_id, n.kind, n.label, n.carry_in,
       n.pid, n.tid, n.stream, n.ends_with_sync, n.sync_start_us, n.sync_end_us, n.wait_end_us,
       CASE WHEN n.kind = 'gpu' THEN 'gpu/' || n.stream ELSE 'cpu/' || n.pid || '/' || n.tid END AS lane,
       n.start_us, n.end_us, w.start_us AS window_start_us, w.cpu_end_us AS window_end_us,
       row_number() OVER (PARTITION BY w.window_index ORDER BY n.start_us, n.node_id) - 1 AS seq
FROM nodes AS n
JOIN wi_windows AS w USING (run_id, rank, step)
-- a gloo execution's node (sql/analysis/40_edges.sql) stays out: the coupling (45_coupling.sql)
-- replays each collective from its arrivals to its completion gates
WHERE n.method = 'ctda' AND NOT (n.kind = 'cpu' AND n.phase = 'Communication' AND starts_with(n.label, 'gloo:'));

-- The engine's edges plus one per lane queue (a thread or stream runs one node at a time)
-- and the sync dependencies below; `allowed_us` is when the edge let its destination start in
-- the measurement.
-- A blocking sync waits for the work queued on its stream whether or not that work was still
-- running: the engine draws a sync edge only where the CPU really waited (the path), but once
-- a change makes the CPU reach the sync sooner (`.item()` after a data-loading stall that
-- outlasted the kernels) the GPU holds it. So the node after each sync (the wait return)
-- depends on the last GPU node, per stream, that ended before the sync returned: on every
-- stream for a device-wide sync (its wait-return node is labelled after the call) or a CPU
-- node that launched nothing, else on the stream the node launched onto.
CREATE OR REPLACE TEMP TABLE wi_edge_times AS
-- The last GPU node per stream that ended by the sync's return, as the latest to start among
-- them: a running arg_max over each stream's nodes in end order (peers at one end share the
-- value), looked up by an ASOF join at the sync's return. A join with every GPU node of the
-- window that ended before it would grow with the square of a loop of .item() calls.
WITH gpu_running AS (
    SELECT DISTINCT window_index, stream, end_us,
           arg_max(node_id, start_us) OVER w AS src, arg_max(end_us, start_us) OVER w AS allowed_us
    FROM wi_nodes
    WHERE kind = 'gpu'
    WINDOW w AS (PARTITION BY window_index, stream ORDER BY end_us RANGE UNBOUNDED PRECEDING)
),
sync_streams AS (
    -- each wait return, on every stream for a device-wide sync or a node that launched
    -- nothing, else on the stream its node launched onto
    SELECT DISTINCT h.window_index, r.node_id AS dst, h.sync_end_us, g.stream
    FROM wi_nodes AS h
    JOIN wi_nodes AS r
        ON r.window_index = h.window_index AND r.kind = 'cpu' AND r.wait_end_us IS NOT NULL
       AND r.pid IS NOT DISTINCT FROM h.pid AND r.tid = h.tid AND r.start_us = h.sync_end_us
    JOIN (SELECT DISTINCT window_index, stream FROM wi_nodes WHERE kind = 'gpu') AS g
        ON g.window_index = h.window_index
       AND (h.stream IS NULL OR g.stream = h.stream
            OR r.label ILIKE 'after %DeviceSynchronize' OR r.label = 'after cuCtxSynchronize')
    WHERE h.kind = 'cpu' AND h.ends_with_sync
),
sync_dependencies AS (
    SELECT s.window_index, g.src, s.dst, g.allowed_us
    FROM sync_streams AS s
    ASOF JOIN gpu_running AS g
        ON g.window_index = s.window_index AND g.stream = s.stream AND g.end_us <= s.sync_end_us
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

-- Launch-queue waits: with the GPU's launch queue full, a launch call blocks until a kernel
-- completes and frees a slot, so the CPU keeps the GPU's pace inside cudaLaunchKernel. The
-- time a launch took beyond its name's median, when that is at least $queue_wait_us, is such
-- a wait, not CPU work: every replay removes it from its thread (factor 0 in wi_work_shrink, 30_work_factors.sql),
-- and the window keeps the GPU's pace instead (wi_window_gates, 40_graph.sql). The same for
-- every scenario of one what-if.
CREATE OR REPLACE TEMP TABLE wi_queue_waits AS
WITH launches AS (
    SELECT e.run_id, e.rank, e.event_id, 'cpu/' || e.pid || '/' || e.tid AS lane, e.ts_us, e.end_us,
           e.dur_us, median(e.dur_us) OVER (PARTITION BY e.run_id, e.rank, e.name) AS typical_us,
           e.correlation
    FROM events AS e
    WHERE e.ph = 'X' AND is_runtime_category(e.cat) AND (e.name ILIKE '%Launch%' OR e.name ILIKE '%MemsetAsync')
      AND (e.run_id, e.rank) IN (SELECT DISTINCT run_id, rank FROM wi_windows)
),
slow AS MATERIALIZED (
    SELECT *, row_number() OVER () AS launch_row
    FROM launches AS l
    WHERE l.dur_us - l.typical_us >= $queue_wait_us
      -- a launch whose own GPU work started within $queue_wait_us of its return found room
      -- in the queue (a full one holds ~1000 launches ahead of it): it was slow for another
      -- reason (a preempted thread, module loading)
      AND NOT EXISTS (SELECT 1 FROM events AS k
                      WHERE k.run_id = l.run_id AND k.rank = l.rank AND k.correlation = l.correlation
                        AND is_gpu_work(k.cat) AND k.ts_us - l.end_us < $queue_wait_us)
),
-- A slow launch and a window of its rank overlap when the window starts in the launch, or the
-- launch starts in the window after its start. A join on the rank with that range would
-- compare every slow launch with every window of its rank (quadratic in a rank's steps).
-- Instead two ordered passes per rank: the windows in start order, each launch's bounds
-- counting the windows that start before them (ties: the bounds first), and the launches in
-- start order, each window's start counting the launches starting at or before it and its
-- end those starting before it. The positions between are candidates, then checked.
window_positions AS MATERIALIZED (
    SELECT *, (sum(is_window) OVER (PARTITION BY run_id, rank ORDER BY at_us, is_window, window_index, launch_row
                                    ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, start_us AS at_us, 1 AS is_window, window_index, start_us AS window_start_us,
               start_us + window_us AS window_end_us, NULL::BIGINT AS launch_row, NULL::BOOLEAN AS is_end,
               NULL::DOUBLE AS launch_ts_us, NULL::DOUBLE AS launch_end_us
        FROM wi_windows
        UNION ALL
        SELECT run_id, rank, ts_us, 0, NULL, NULL, NULL, launch_row, false, ts_us, end_us FROM slow
        UNION ALL
        SELECT run_id, rank, end_us, 0, NULL, NULL, NULL, launch_row, true, ts_us, end_us FROM slow
    )
),
launch_positions AS MATERIALIZED (
    SELECT *, (sum(is_launch) OVER (PARTITION BY run_id, rank ORDER BY at_us, bound_order, launch_row, window_index
                                    ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, ts_us AS at_us, 1 AS bound_order, 1 AS is_launch, launch_row, ts_us AS launch_ts_us,
               end_us AS launch_end_us, NULL::BIGINT AS window_index, NULL::BOOLEAN AS is_end,
               NULL::DOUBLE AS window_start_us, NULL::DOUBLE AS window_end_us
        FROM slow
        UNION ALL
        SELECT run_id, rank, start_us, 2, 0, NULL, NULL, NULL, window_index, false, start_us, start_us + window_us
        FROM wi_windows
        UNION ALL
        SELECT run_id, rank, start_us + window_us, 0, 0, NULL, NULL, NULL, window_index, true, start_us,
               start_us + window_us
        FROM wi_windows
    )
),
-- (each check goes with its positions' join, on the values the positions carry)
overlapping AS (
    SELECT b.launch_row, w.window_index
    FROM (SELECT launch_row, run_id, rank, any_value(launch_ts_us) AS launch_ts_us,
                 any_value(launch_end_us) AS launch_end_us,
                 unnest(range(max(position) FILTER (WHERE NOT is_end) + 1,
                              max(position) FILTER (WHERE is_end) + 1)) AS position
          FROM window_positions WHERE is_window = 0 GROUP BY launch_row, run_id, rank) AS b
    JOIN window_positions AS w USING (run_id, rank, position)
    WHERE w.is_window = 1 AND w.window_start_us >= b.launch_ts_us
      AND b.launch_end_us > w.window_start_us AND b.launch_ts_us < w.window_end_us
    UNION ALL
    SELECT l.launch_row, b.window_index
    FROM (SELECT window_index, run_id, rank, any_value(window_start_us) AS window_start_us,
                 any_value(window_end_us) AS window_end_us,
                 unnest(range(max(position) FILTER (WHERE NOT is_end) + 1,
                              max(position) FILTER (WHERE is_end) + 1)) AS position
          FROM launch_positions WHERE is_launch = 0 GROUP BY window_index, run_id, rank) AS b
    JOIN launch_positions AS l USING (run_id, rank, position)
    WHERE l.is_launch = 1 AND b.window_start_us < l.launch_ts_us
      AND l.launch_end_us > b.window_start_us AND l.launch_ts_us < b.window_end_us
),
waits AS (
    SELECT w.window_index, w.window_us, l.run_id, l.rank, l.event_id, l.lane,
           greatest(l.ts_us + l.typical_us, w.start_us) AS ts_us, least(l.end_us, w.start_us + w.window_us) AS end_us
    FROM overlapping AS o
    JOIN slow AS l USING (launch_row)
    JOIN wi_windows AS w USING (window_index)
)
-- a stray slow launch (a first launch loading modules, the thread preempted) is no full
-- queue: only windows whose launches waited $queue_share of their length count
SELECT * FROM waits
QUALIFY sum(end_us - ts_us) OVER (PARTITION BY window_index) >= $queue_share * window_us;

-- Where each window's CPU side ends: after its last CPU node, by the measured tail.
CREATE OR REPLACE TEMP TABLE wi_window_tails AS
SELECT window_index, arg_max(seq, end_us) AS tail_seq, arg_max(end_us, end_us) AS node_end_us,
       arg_max(lane, end_us) AS lane, any_value(window_end_us) AS window_end_us
FROM wi_nodes
WHERE kind = 'cpu' AND start_us < window_end_us
GROUP BY window_index;

