-- reads: wi_coupled_groups, wi_windows, wi_coupled_instances, wi_coupled_calls, wi_nodes,
--        collective_instances, wi_replay_nodes, wi_coupled_arrivals
-- registered: wi_cluster_transfers
-- makes: _wi_cluster_kernels(window_index, seq, old_us, new_us)
-- writes: wi_coupled_gates, wi_replay_edges, wi_coupled_arrivals, wi_replay_nodes
-- whatif --cluster (warehouse/whatif/cluster.py), after the scenario's stages: a collective's
-- transfer becomes its simulated time on the cluster (wi_cluster_transfers: run_id, pg, seq,
-- transfer_us). A coupled collective's transfer runs from its last arrival to its end.

-- CPU gates (a thread that resumed after a gloo or synchronous collective ended): the
-- completion moves by the simulated transfer less the rank's measured one.
UPDATE wi_coupled_gates AS g
SET after_us = g.after_us + (t.transfer_us - c.transfer_us)
FROM wi_coupled_groups AS grp, wi_windows AS w, wi_coupled_instances AS c, wi_cluster_transfers AS t
WHERE grp.group_index = g.group_index AND w.window_index = g.window_index
  AND c.run_id = grp.run_id AND c.pg = grp.pg AND c.seq = grp.seq AND c.rank = w.rank
  AND t.run_id = grp.run_id AND t.pg = grp.pg AND t.seq = grp.seq
  AND c.executed_on <> 'nccl_kernel';

-- A rank without a gate (45_coupling.sql looks for a resume within $resume_us of the end) is
-- gated at the first node of the calling thread that started after the transfer ended (DDP
-- copies each bucket back to the gradients there). When the thread sat idle across the end,
-- it waited for the collective: the gate holds the node (no engine edge keeps its slack, the
-- measured resume lag is kept); otherwise the thread was still busy, and on a slower network
-- it would wait there: the gate holds nothing in the measurement.
INSERT INTO wi_coupled_gates
WITH calls AS (
    SELECT c.run_id, c.rank, c.pg, c.seq, c.enqueue_us, c.end_us, grp.group_index, c.window_index,
           c.call_lane AS lane
    FROM wi_coupled_calls AS c
    JOIN wi_coupled_groups AS grp USING (run_id, pg, seq)
    WHERE NOT c.returned_early  -- a send that returned before its receiver arrived waits for no one
),
gated AS (
    SELECT DISTINCT g.group_index, w.rank FROM wi_coupled_gates AS g JOIN wi_windows AS w USING (window_index)
),
lane_nodes AS (
    SELECT window_index, seq, lane, start_us,
           coalesce(lag(end_us) OVER (PARTITION BY window_index, lane ORDER BY start_us, node_id), window_start_us)
               AS idle_from_us
    FROM wi_nodes WHERE kind = 'cpu'
),
-- the first node of the lane to start after the call and its end, by ASOF joins (a join with
-- every node of the lane after it would grow with the square of the lane's calls); of
-- nodes that start at one instant, the first in the window's order (the ASOF join alone would
-- take any)
lane_starts AS (
    SELECT window_index, lane, start_us, min(seq) AS seq, arg_min(idle_from_us, seq) AS idle_from_us
    FROM lane_nodes GROUP BY ALL
),
next_nodes AS (
    SELECT c.*, n.seq AS node_seq, n.start_us AS node_start_us, n.idle_from_us AS node_idle_from_us
    FROM calls AS c
    ASOF JOIN lane_starts AS n
        ON n.window_index = c.window_index AND n.lane = c.lane AND n.start_us >= c.end_us
    WHERE c.enqueue_us < c.end_us
    UNION ALL
    SELECT c.*, n.seq, n.start_us, n.idle_from_us
    FROM calls AS c
    ASOF JOIN lane_starts AS n
        ON n.window_index = c.window_index AND n.lane = c.lane AND n.start_us > c.enqueue_us
    WHERE c.enqueue_us >= c.end_us
),
first_after AS (
    SELECT c.group_index, c.window_index, c.lane, c.end_us, any_value(t.transfer_us) AS transfer_us,
           arg_min(c.node_seq, c.node_start_us) AS gate_seq, min(c.node_start_us) AS gate_start_us,
           arg_min(c.node_idle_from_us, c.node_start_us) AS idle_from_us
    FROM next_nodes AS c
    JOIN wi_cluster_transfers AS t USING (run_id, pg, seq)
    WHERE (c.group_index, c.rank) NOT IN (SELECT group_index, rank FROM gated)
    GROUP BY c.group_index, c.window_index, c.lane, c.end_us
),
-- the resume lag counts from the last collective that ended while the thread sat idle (DDP
-- waits for its buckets in order: an earlier bucket's end is no resume): the lane's last call
-- end by the gate's start, by an ASOF join
last_ends AS (
    SELECT f.window_index, f.gate_seq, max(c.end_us) AS last_end_us
    FROM first_after AS f
    ASOF JOIN (SELECT DISTINCT window_index, lane, end_us FROM calls) AS c
        ON c.window_index = f.window_index AND c.lane = f.lane AND c.end_us <= f.gate_start_us
    WHERE c.end_us >= f.idle_from_us
    GROUP BY ALL
)
SELECT f.group_index, f.window_index, f.gate_seq,
       f.transfer_us + CASE WHEN f.idle_from_us <= f.end_us THEN f.gate_start_us - l.last_end_us ELSE 0.0 END
           AS after_us,
       f.idle_from_us <= f.end_us AS binding
FROM first_after AS f
LEFT JOIN last_ends AS l USING (window_index, gate_seq);

-- NCCL kernels: the kernel's node keeps its wait for the last arrival (coupled) and runs the
-- simulated transfer; a kernel of an uncoupled rank runs the simulated transfer alone. (Its
-- own node: a carry-in copy in a later window moves with its stream, 45_coupling.sql.)
CREATE OR REPLACE TEMP TABLE _wi_cluster_kernels AS
SELECT n.window_index, n.seq, r.duration_us AS old_us,
       coalesce(r.duration_us * a.wait_share, 0.0) + t.transfer_us AS new_us
FROM collective_instances AS c
JOIN wi_cluster_transfers AS t USING (run_id, pg, seq)
JOIN wi_nodes AS n
    ON n.run_id = c.run_id AND n.rank = c.rank AND n.kind = 'gpu' AND NOT n.carry_in
   AND n.start_us = c.start_us AND n.end_us = c.end_us
JOIN wi_replay_nodes AS r ON r.window_index = n.window_index AND r.seq = n.seq
LEFT JOIN wi_coupled_arrivals AS a ON a.window_index = n.window_index AND a.anchor_seq = n.seq AND a.pre_floor
WHERE c.executed_on = 'nccl_kernel';

-- what waited for the kernel's end waits for its new end
UPDATE wi_replay_edges AS e
SET offset_us = e.offset_us + (k.new_us - k.old_us)
FROM _wi_cluster_kernels AS k
WHERE e.window_index = k.window_index AND e.src_seq = k.seq AND e.offset_us >= k.old_us - 1e-6;

UPDATE wi_coupled_arrivals AS a
SET wait_share = CASE WHEN k.new_us > 0 THEN k.old_us * a.wait_share / k.new_us ELSE 0.0 END
FROM _wi_cluster_kernels AS k
WHERE a.window_index = k.window_index AND a.anchor_seq = k.seq AND a.pre_floor;

UPDATE wi_replay_nodes AS r
SET duration_us = k.new_us
FROM _wi_cluster_kernels AS k
WHERE r.window_index = k.window_index AND r.seq = k.seq;
