-- Multi-rank coupling: when a run's replay holds several ranks, a matched collective
-- (collective_instances) completes on every rank at the latest replayed arrival over its
-- ranks plus that rank's transfer time (its measured duration less its wait for the last
-- arrival). Times are in aligned clocks (traces.clock_offset_us); the forward pass in
-- warehouse/whatif/replay.py places every window at an aligned origin that moves with the replayed
-- length of the rank's previous window.
--
-- Arrivals: a NCCL kernel arrives when its node would start without the coupling; a gloo or
-- synchronous collective arrives where its call was made (a point inside the CPU node that
-- holds the call, or after the last one before it) plus the measured pick-up lag.
-- Completion gates: a NCCL kernel node starts its transfer at the last arrival; a CPU node
-- that resumed within $resume_us after the collective ended, from a gap on its thread that
-- holds the end (blocked in wait()), starts at the completion plus the measured resume lag.
-- A group is coupled only when every rank's arrival is in the replay; otherwise its ranks
-- keep their measured waiting (the per-rank replay).

-- Per window: its aligned origin and the measured gap after the rank's previous window.
CREATE OR REPLACE TEMP TABLE wi_window_origins AS
SELECT w.window_index, w.run_id, w.rank,
       w.start_us - coalesce(t.clock_offset_us, 0.0) AS origin_us,
       w.start_us - lag(w.start_us + w.window_us) OVER r AS gap_before_us,
       lag(w.window_index) OVER r AS previous_window
FROM wi_windows AS w
JOIN traces AS t USING (run_id, rank)
WINDOW r AS (PARTITION BY w.run_id, w.rank ORDER BY w.step);

CREATE OR REPLACE TEMP TABLE wi_coupled_instances AS
WITH runs AS (
    SELECT run_id FROM wi_windows WHERE $coupled GROUP BY run_id HAVING count(DISTINCT rank) > 1
)
SELECT i.run_id, i.rank, i.pg, i.seq, i.executed_on, i.enqueue_us, i.start_us, i.end_us, i.cpu_event_id,
       i.aligned_start_us,
       greatest(0.0, i.end_us - coalesce(t.clock_offset_us, 0.0) - max(i.aligned_start_us) OVER g) AS transfer_us,
       count(*) OVER g AS group_instances
FROM collective_instances AS i
JOIN traces AS t USING (run_id, rank)
WHERE i.matched AND i.run_id IN (SELECT run_id FROM runs)
WINDOW g AS (PARTITION BY i.run_id, i.pg, i.seq);

-- NCCL kernels: the kernel's own node (single-kernel GPU node of the same span).
CREATE OR REPLACE TEMP TABLE wi_coupled_arrivals_raw AS
WITH kernels AS (
    SELECT c.run_id, c.pg, c.seq, c.group_instances, n.window_index, n.seq AS anchor_seq, true AS pre_floor,
           0.0 AS offset_us, c.transfer_us, c.end_us - c.start_us AS dur_us, c.aligned_start_us AS measured_us
    FROM wi_coupled_instances AS c
    JOIN wi_nodes AS n
        ON n.run_id = c.run_id AND n.rank = c.rank AND n.kind = 'gpu' AND NOT n.carry_in
       AND n.start_us = c.start_us AND n.end_us = c.end_us
    WHERE c.executed_on = 'nccl_kernel'
),
calls AS (
    SELECT c.*, 'cpu/' || e.pid || '/' || e.tid AS call_lane, w.window_index, w.start_us AS window_start_us
    FROM wi_coupled_instances AS c
    JOIN events AS e ON e.run_id = c.run_id AND e.rank = c.rank AND e.event_id = c.cpu_event_id
    JOIN wi_windows AS w
        ON w.run_id = c.run_id AND w.rank = c.rank AND c.enqueue_us >= w.start_us AND c.enqueue_us < w.end_us
    WHERE c.executed_on <> 'nccl_kernel'
),
anchored AS (
    SELECT c.run_id, c.rank, c.pg, c.seq, c.group_instances, c.window_index, c.call_lane, c.enqueue_us,
           c.start_us, c.window_start_us, c.aligned_start_us,
           arg_max(n.seq, n.start_us) AS anchor_seq, max(n.start_us) AS anchor_start_us
    FROM calls AS c
    LEFT JOIN wi_nodes AS n
        ON n.window_index = c.window_index AND n.lane = c.call_lane AND n.start_us <= c.enqueue_us
    GROUP BY ALL
),
points AS (
    SELECT *, enqueue_us AS t, 'call' AS point FROM anchored
    UNION ALL SELECT *, coalesce(anchor_start_us, window_start_us), 'base' FROM anchored
),
removed AS (
    SELECT p.*, coalesce(s.removed_before_us + s.removed_rate * least(greatest(p.t - s.from_us, 0), s.to_us - s.from_us),
                         0.0) AS removed_us
    FROM points AS p
    ASOF LEFT JOIN wi_shrink AS s
        ON s.run_id = p.run_id AND s.rank = p.rank AND s.lane = p.call_lane AND s.from_us <= p.t
),
cpu AS (
    SELECT run_id, pg, seq, any_value(group_instances) AS group_instances, any_value(window_index) AS window_index,
           any_value(anchor_seq) AS anchor_seq, false AS pre_floor,
           any_value(enqueue_us - coalesce(anchor_start_us, window_start_us))
               - (sum(removed_us) FILTER (WHERE point = 'call') - sum(removed_us) FILTER (WHERE point = 'base'))
               + any_value(start_us - enqueue_us) AS offset_us,
           NULL::DOUBLE AS transfer_us, NULL::DOUBLE AS dur_us, any_value(aligned_start_us) AS measured_us
    FROM removed
    GROUP BY run_id, rank, pg, seq
)
SELECT * FROM kernels
UNION ALL
SELECT * FROM cpu;

-- Only groups whose every rank arrives in the replay are coupled.
CREATE OR REPLACE TEMP TABLE wi_coupled_groups AS
SELECT run_id, pg, seq, row_number() OVER (ORDER BY run_id, pg, seq) - 1 AS group_index
FROM wi_coupled_arrivals_raw
GROUP BY run_id, pg, seq
HAVING count(*) = any_value(group_instances);

CREATE OR REPLACE TEMP TABLE wi_coupled_arrivals AS
SELECT g.group_index, a.window_index, coalesce(a.anchor_seq, -1) AS anchor_seq, a.pre_floor, a.offset_us,
       a.measured_us,
       -- a kernel's share of its measured time that was waiting for the last arrival
       CASE WHEN a.pre_floor AND a.dur_us > 0 THEN 1.0 - least(a.transfer_us, a.dur_us) / a.dur_us END AS wait_share
FROM wi_coupled_arrivals_raw AS a
JOIN wi_coupled_groups AS g USING (run_id, pg, seq);

-- Completion gates on CPU threads: the node that resumed after a gap holding the collective's end.
-- The resume lag is counted net of the time the scenario removes on the node's thread in the
-- gap: work between the completion and the node that is not a node of its own (a sleep in an
-- annotation, as a slow pipeline stage's after its recv) goes with the change, and the node
-- still waits for the replayed completion (it needs what the recv brought).
-- C(t): time removed on a lane before t, from its wi_shrink stretch s at or before t (NULL: none)
CREATE OR REPLACE TEMP MACRO wi_removed_at(s, t) AS
    coalesce(s.removed_before_us + s.removed_rate * least(greatest(t - s.from_us, 0), s.to_us - s.from_us), 0.0);

CREATE OR REPLACE TEMP TABLE wi_coupled_gates AS
WITH lane_nodes AS (
    SELECT n.*, coalesce(lag(n.end_us) OVER (PARTITION BY n.window_index, n.lane ORDER BY n.start_us, n.node_id),
                         n.window_start_us) AS previous_end_us
    FROM wi_nodes AS n
    WHERE n.kind = 'cpu'
),
-- C(t) on a node's lane at its start and at the end of the gap before it
at_start AS (
    SELECT n.*, wi_removed_at(s, n.start_us) AS removed_at_start_us
    FROM lane_nodes AS n
    ASOF LEFT JOIN wi_shrink AS s
        ON s.run_id = n.run_id AND s.rank = n.rank AND s.lane = n.lane AND s.from_us <= n.start_us
),
gapped AS (
    SELECT n.*, n.removed_at_start_us
                - wi_removed_at(s, n.previous_end_us) AS gap_removed_us
    FROM at_start AS n
    ASOF LEFT JOIN wi_shrink AS s
        ON s.run_id = n.run_id AND s.rank = n.rank AND s.lane = n.lane AND s.from_us <= n.previous_end_us
),
candidates AS (
    SELECT g.group_index, n.window_index, n.seq AS gate_seq, n.run_id, n.rank, n.lane, n.start_us,
           n.removed_at_start_us, c.transfer_us, c.end_us
    FROM wi_coupled_instances AS c
    JOIN wi_coupled_groups AS g USING (run_id, pg, seq)
    JOIN (SELECT *, start_us - gap_removed_us AS net_start_us FROM gapped) AS n
        ON n.run_id = c.run_id AND n.rank = c.rank AND n.start_us >= c.end_us
       AND n.net_start_us <= c.end_us + $resume_us AND n.previous_end_us <= c.end_us
    WHERE c.executed_on <> 'nccl_kernel'
),
waits AS (
    SELECT c.group_index, c.window_index, c.gate_seq, c.transfer_us, c.end_us,
           c.start_us - c.end_us - (c.removed_at_start_us - wi_removed_at(s, c.end_us)) AS resume_us
    FROM candidates AS c
    ASOF LEFT JOIN wi_shrink AS s
        ON s.run_id = c.run_id AND s.rank = c.rank AND s.lane = c.lane AND s.from_us <= c.end_us
),
latest AS (
    SELECT window_index, dst_seq, max(allowed_us) AS allowed_us FROM wi_edge_times GROUP BY ALL
),
held AS (
    SELECT w.*, w.end_us >= coalesce(l.allowed_us, '-infinity'::DOUBLE) AS binding
    FROM (SELECT * FROM waits WHERE resume_us <= $resume_us) AS w
    LEFT JOIN latest AS l ON l.window_index = w.window_index AND l.dst_seq = w.gate_seq
)
-- the gate that held the node keeps the measured resume lag, counted from the last of the
-- node's collectives to end (the thread resumed once all it waited for had come; the latest
-- end leaves the least lag); then no engine edge keeps slack
SELECT group_index, window_index, gate_seq,
       transfer_us + CASE WHEN binding THEN min(resume_us) OVER (PARTITION BY window_index, gate_seq) ELSE 0.0 END
           AS after_us,
       binding
FROM held
UNION ALL
SELECT group_index, window_index, anchor_seq, 0.0, false
FROM wi_coupled_arrivals WHERE pre_floor;
