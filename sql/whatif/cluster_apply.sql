-- whatif --cluster (warehouse/whatif_cluster.py), after the scenario's stages: a collective's
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

-- A rank that did not wait for a gloo collective in the measurement has no gate: its thread
-- was still busy when the transfer ended. On a slower network it would wait, at the first node
-- of the calling thread that started after the transfer ended (DDP copies each bucket back
-- to the gradients once its all-reduce is done): that node is gated by the completion. In
-- the measurement the gate holds nothing (the node started after the end).
INSERT INTO wi_coupled_gates
WITH calls AS (
    SELECT c.run_id, c.rank, c.pg, c.seq, c.enqueue_us, c.end_us, grp.group_index, w.window_index,
           'cpu/' || e.pid || '/' || e.tid AS lane
    FROM wi_coupled_instances AS c
    JOIN wi_coupled_groups AS grp USING (run_id, pg, seq)
    JOIN events AS e ON e.run_id = c.run_id AND e.rank = c.rank AND e.event_id = c.cpu_event_id
    JOIN wi_windows AS w
        ON w.run_id = c.run_id AND w.rank = c.rank AND c.enqueue_us >= w.start_us AND c.enqueue_us < w.end_us
    WHERE c.executed_on <> 'nccl_kernel'
),
gated AS (
    SELECT DISTINCT g.group_index, w.rank FROM wi_coupled_gates AS g JOIN wi_windows AS w USING (window_index)
)
SELECT c.group_index, c.window_index, arg_min(n.seq, n.start_us) AS gate_seq, any_value(t.transfer_us) AS after_us,
       false AS binding
FROM calls AS c
JOIN wi_cluster_transfers AS t USING (run_id, pg, seq)
JOIN wi_nodes AS n
    ON n.window_index = c.window_index AND n.lane = c.lane AND n.start_us >= c.end_us AND n.start_us > c.enqueue_us
WHERE (c.group_index, c.rank) NOT IN (SELECT group_index, rank FROM gated)
GROUP BY c.group_index, c.window_index;

-- NCCL kernels: the kernel's node keeps its wait for the last arrival (coupled) and runs the
-- simulated transfer; a kernel of an uncoupled rank runs the simulated transfer alone.
CREATE OR REPLACE TEMP TABLE wi_cluster_kernels AS
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
FROM wi_cluster_kernels AS k
WHERE e.window_index = k.window_index AND e.src_seq = k.seq AND e.offset_us >= k.old_us - 1e-6;

UPDATE wi_coupled_arrivals AS a
SET wait_share = CASE WHEN k.new_us > 0 THEN k.old_us * a.wait_share / k.new_us ELSE 0.0 END
FROM wi_cluster_kernels AS k
WHERE a.window_index = k.window_index AND a.anchor_seq = k.seq AND a.pre_floor;

UPDATE wi_replay_nodes AS r
SET duration_us = k.new_us
FROM wi_cluster_kernels AS k
WHERE r.window_index = k.window_index AND r.seq = k.seq;
