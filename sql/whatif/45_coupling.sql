-- reads: wi_windows, traces, collective_instances, events, wi_nodes, wi_shrink, wi_edge_times,
--        edges, nodes, wi_gloo_transfer, wi_collective, wi_event_factors
-- makes: wi_window_origins(window_index, run_id, rank, origin_us, gap_before_us, previous_window)
-- makes: wi_coupled_instances(run_id, rank, pg, seq, executed_on, enqueue_us, start_us, end_us,
--                             cpu_event_id, aligned_start_us, returned_early, transfer_us,
--                             group_instances)
-- makes: wi_coupled_calls(run_id, rank, pg, seq, executed_on, enqueue_us, start_us, end_us,
--                         cpu_event_id, aligned_start_us, returned_early, transfer_us,
--                         group_instances, call_lane, window_index, window_start_us)
-- makes: _wi_coupled_arrivals_raw(run_id, pg, seq, group_instances, window_index, anchor_seq,
--                                pre_floor, offset_us, transfer_us, dur_us, measured_us,
--                                returned_early)
-- makes: wi_coupled_groups(run_id, pg, seq, group_index)
-- makes: wi_coupled_arrivals(group_index, window_index, anchor_seq, pre_floor, offset_us,
--                            measured_us, returned_early, wait_share)
-- makes: wi_coupled_gates(group_index, window_index, gate_seq, after_us, binding)
-- makes: _wi_comm_wait_gates(group_index, window_index, gate_seq, after_us, binding)
-- makes macro: _wi_removed_at(s, t)
-- param: coupled BOOLEAN
-- param: network_changed BOOLEAN
-- param: world_size INTEGER
-- param: algorithm VARCHAR
-- param: bandwidth_scale DOUBLE
-- param: latency_us DOUBLE
-- param: resume_us DOUBLE
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
SELECT run_id, rank, pg, seq, executed_on, enqueue_us, start_us, end_us, cpu_event_id, aligned_start_us,
       returned_early,
       -- a gloo worker's transfer follows the scenario's network (20_collectives.sql) and a
       -- --scale of its execution (30_work_factors.sql); a NCCL kernel's follows its kernel
       -- (30_work_factors.sql, wait_share below)
       CASE WHEN $network_changed AND executed_on = 'gloo_worker'
            THEN wi_gloo_transfer(measured_transfer_us, wi_collective(name), group_size, $world_size, $algorithm,
                                  $bandwidth_scale, $latency_us)
            ELSE measured_transfer_us END
       * CASE WHEN executed_on = 'gloo_worker' THEN coalesce(execution_factor, 1.0) ELSE 1.0 END AS transfer_us,
       group_instances
FROM (
    SELECT i.run_id, i.rank, i.pg, i.seq, i.executed_on, i.enqueue_us, i.start_us, i.end_us, i.cpu_event_id,
           i.aligned_start_us,
           -- a send that returned before its receiver arrived (buffered: matching gives it no wait,
           -- though it arrived first) ran alone: its whole run is its transfer, and the replay
           -- holds it for no one (no gate); its arrival still lets the receiver go
           i.wait_us = 0 AND i.aligned_start_us < max(i.aligned_start_us) OVER g AS returned_early,
           CASE WHEN returned_early THEN i.end_us - i.start_us
                ELSE greatest(0.0, i.end_us - coalesce(t.clock_offset_us, 0.0) - max(i.aligned_start_us) OVER g)
           END AS measured_transfer_us,
           count(*) OVER g AS group_instances,
           i.name, len(i.group_ranks) AS group_size, f.factor AS execution_factor
    FROM collective_instances AS i
    JOIN traces AS t USING (run_id, rank)
    LEFT JOIN (SELECT run_id, rank, event_id, min(factor) AS factor FROM wi_event_factors GROUP BY ALL) AS f
        ON f.run_id = i.run_id AND f.rank = i.rank AND f.event_id = i.exec_event_id
    WHERE i.matched AND i.run_id IN (SELECT run_id FROM runs)
    WINDOW g AS (PARTITION BY i.run_id, i.pg, i.seq)
);

-- gloo and synchronous collectives with the window that holds their call and the call's
-- thread (its lane). The window goes by positions from one ordered pass (a join on the rank
-- with the range would compare every call with every window of its rank): a rank's
-- calls in enqueue order get positions, and each window's bounds count the calls before them
-- (ties: a call at the window's start is in it, one at its end is not); the window's calls are
-- the positions between. Windows partition a rank's time, so each call is a candidate of one.
CREATE OR REPLACE TEMP TABLE wi_coupled_calls AS
WITH coupled_calls AS MATERIALIZED (
    SELECT *, row_number() OVER () AS call_row FROM wi_coupled_instances WHERE executed_on <> 'nccl_kernel'
),
windows AS MATERIALIZED (
    SELECT *, row_number() OVER () AS window_row FROM wi_windows
),
call_positions AS MATERIALIZED (
    SELECT *, (sum(is_call) OVER (PARTITION BY run_id, rank ORDER BY t, is_call, call_row
                                  ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, enqueue_us AS t, 1 AS is_call, call_row, NULL::BIGINT AS window_row, NULL AS bound,
               NULL::DOUBLE AS start_us, NULL::DOUBLE AS end_us
        FROM coupled_calls
        UNION ALL
        SELECT run_id, rank, start_us, 0, NULL, window_row, 'start', start_us, end_us FROM windows
        UNION ALL
        SELECT run_id, rank, end_us, 0, NULL, window_row, 'end', start_us, end_us FROM windows
    )
),
-- (the check goes with the positions' join, on the values the positions carry: with the calls
-- and the windows joined in, the planner may compare them directly, every one with every one)
window_calls AS (
    SELECT c.call_row, w.window_row
    FROM (SELECT window_row, run_id, rank, start_us, end_us,
                 unnest(range(max(position) FILTER (WHERE bound = 'start') + 1,
                              max(position) FILTER (WHERE bound = 'end') + 1)) AS position
          FROM call_positions
          WHERE is_call = 0
          GROUP BY window_row, run_id, rank, start_us, end_us) AS w
    JOIN call_positions AS c USING (run_id, rank, position)
    WHERE c.is_call = 1 AND c.t >= w.start_us AND c.t < w.end_us
)
SELECT c.* EXCLUDE (call_row), 'cpu/' || e.pid || '/' || e.tid AS call_lane, w.window_index,
       w.start_us AS window_start_us
FROM coupled_calls AS c
JOIN window_calls AS p USING (call_row)
JOIN events AS e ON e.run_id = c.run_id AND e.rank = c.rank AND e.event_id = c.cpu_event_id
JOIN windows AS w ON w.window_row = p.window_row;

-- NCCL kernels: the kernel's own node (single-kernel GPU node of the same span), in the window
-- that launched it. Still running in a later window, the kernel is a carry-in node of the same
-- span there too (sql/analysis/30_gpu_nodes.sql): that one stays out (a rank arriving twice
-- leaves the group uncoupled) and moves with its stream's replayed end (40_graph.sql).
CREATE OR REPLACE TEMP TABLE _wi_coupled_arrivals_raw AS
WITH kernels AS (
    SELECT c.run_id, c.pg, c.seq, c.group_instances, n.window_index, n.seq AS anchor_seq, true AS pre_floor,
           0.0 AS offset_us, c.transfer_us, c.end_us - c.start_us AS dur_us, c.aligned_start_us AS measured_us,
           c.returned_early
    FROM wi_coupled_instances AS c
    JOIN wi_nodes AS n
        ON n.run_id = c.run_id AND n.rank = c.rank AND n.kind = 'gpu' AND NOT n.carry_in
       AND n.start_us = c.start_us AND n.end_us = c.end_us
    WHERE c.executed_on = 'nccl_kernel'
),
-- The node of the call's lane that started last at or before the call, by an ASOF join (a join
-- with every node of the lane that started before it would grow with the square of the lane's
-- calls); of nodes that start at one instant, the last in the window's order (the ASOF join
-- alone would take any).
lane_starts AS (
    SELECT window_index, lane, start_us, max(seq) AS seq FROM wi_nodes GROUP BY ALL
),
anchored AS (
    SELECT DISTINCT c.run_id, c.rank, c.pg, c.seq, c.group_instances, c.window_index, c.call_lane, c.enqueue_us,
           c.start_us, c.window_start_us, c.aligned_start_us, c.returned_early,
           n.seq AS anchor_seq, n.start_us AS anchor_start_us
    FROM wi_coupled_calls AS c
    ASOF LEFT JOIN lane_starts AS n
        ON n.window_index = c.window_index AND n.lane = c.call_lane AND n.start_us <= c.enqueue_us
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
           NULL::DOUBLE AS transfer_us, NULL::DOUBLE AS dur_us, any_value(aligned_start_us) AS measured_us,
           any_value(returned_early) AS returned_early
    FROM removed
    GROUP BY run_id, rank, pg, seq
)
SELECT * FROM kernels
UNION ALL
SELECT * FROM cpu;

-- Only groups whose every rank arrives in the replay are coupled.
CREATE OR REPLACE TEMP TABLE wi_coupled_groups AS
SELECT run_id, pg, seq, row_number() OVER (ORDER BY run_id, pg, seq) - 1 AS group_index
FROM _wi_coupled_arrivals_raw
GROUP BY run_id, pg, seq
HAVING count(*) = any_value(group_instances);

CREATE OR REPLACE TEMP TABLE wi_coupled_arrivals AS
SELECT g.group_index, a.window_index, coalesce(a.anchor_seq, -1) AS anchor_seq, a.pre_floor, a.offset_us,
       a.measured_us, a.returned_early,
       -- a kernel's share of its measured time that was waiting for the last arrival
       CASE WHEN a.pre_floor AND a.dur_us > 0 THEN 1.0 - least(a.transfer_us, a.dur_us) / a.dur_us END AS wait_share
FROM _wi_coupled_arrivals_raw AS a
JOIN wi_coupled_groups AS g USING (run_id, pg, seq);

-- Completion gates on CPU threads: the node that resumed after a gap holding the collective's end.
-- The resume lag is counted net of the time the scenario removes on the node's thread in the
-- gap: work between the completion and the node that is not a node of its own (a sleep in an
-- annotation, as a slow pipeline stage's after its recv) goes with the change, and the node
-- still waits for the replayed completion (it needs what the recv brought).
-- C(t): time removed on a lane before t, from its wi_shrink stretch s at or before t (NULL: none)
CREATE OR REPLACE TEMP MACRO _wi_removed_at(s, t) AS
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
    SELECT n.*, _wi_removed_at(s, n.start_us) AS removed_at_start_us
    FROM lane_nodes AS n
    ASOF LEFT JOIN wi_shrink AS s
        ON s.run_id = n.run_id AND s.rank = n.rank AND s.lane = n.lane AND s.from_us <= n.start_us
),
gapped AS (
    SELECT n.*, n.removed_at_start_us
                - _wi_removed_at(s, n.previous_end_us) AS gap_removed_us
    FROM at_start AS n
    ASOF LEFT JOIN wi_shrink AS s
        ON s.run_id = n.run_id AND s.rank = n.rank AND s.lane = n.lane AND s.from_us <= n.previous_end_us
),
-- The nodes whose gap holds a collective's end, by positions from one ordered pass (a join on
-- the rank with the range would compare every collective with every CPU node of its rank):
-- the rank's collectives in end order, and each node's gap bounds counting the ends
-- before its start and at or before its end; the gap's collectives are the positions
-- between. A lane's gaps do not overlap, so each end is a candidate of one gap per lane.
ended AS MATERIALIZED (
    SELECT g.group_index, c.run_id, c.rank, c.transfer_us, c.end_us, row_number() OVER () AS ended_row
    FROM wi_coupled_instances AS c
    JOIN wi_coupled_groups AS g USING (run_id, pg, seq)
    WHERE c.executed_on <> 'nccl_kernel' AND NOT c.returned_early
),
gaps AS MATERIALIZED (
    SELECT *, start_us - gap_removed_us AS net_start_us, row_number() OVER () AS gap_row FROM gapped
),
end_positions AS MATERIALIZED (
    SELECT *, (sum(is_end) OVER (PARTITION BY run_id, rank ORDER BY t, bound_order, ended_row
                                 ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, end_us AS t, 1 AS bound_order, 1 AS is_end, ended_row, NULL::BIGINT AS gap_row,
               NULL::DOUBLE AS previous_end_us, NULL::DOUBLE AS start_us, NULL::DOUBLE AS net_start_us
        FROM ended
        UNION ALL
        SELECT run_id, rank, previous_end_us, 0, 0, NULL, gap_row, previous_end_us, start_us, net_start_us FROM gaps
        UNION ALL
        SELECT run_id, rank, start_us, 2, 0, NULL, gap_row, previous_end_us, start_us, net_start_us FROM gaps
    )
),
-- (the check goes with the positions' join, on the values the positions carry: with the
-- collectives and the nodes joined in, the planner may compare them directly)
gap_ends AS (
    SELECT e.ended_row, g.gap_row
    FROM (SELECT gap_row, run_id, rank, previous_end_us, start_us, net_start_us,
                 unnest(range(max(position) FILTER (WHERE bound_order = 0) + 1,
                              max(position) FILTER (WHERE bound_order = 2) + 1)) AS position
          FROM end_positions
          WHERE is_end = 0
          GROUP BY gap_row, run_id, rank, previous_end_us, start_us, net_start_us) AS g
    JOIN end_positions AS e USING (run_id, rank, position)
    WHERE e.is_end = 1 AND g.start_us >= e.t AND g.net_start_us <= e.t + $resume_us AND g.previous_end_us <= e.t
),
candidates AS (
    SELECT c.group_index, n.window_index, n.seq AS gate_seq, n.run_id, n.rank, n.lane, n.start_us,
           n.removed_at_start_us, c.transfer_us, c.end_us
    FROM gap_ends AS p
    JOIN ended AS c USING (ended_row)
    JOIN gaps AS n USING (gap_row)
),
waits AS (
    SELECT c.group_index, c.window_index, c.gate_seq, c.transfer_us, c.end_us,
           c.start_us - c.end_us - (c.removed_at_start_us - _wi_removed_at(s, c.end_us)) AS resume_us
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
FROM wi_coupled_arrivals WHERE pre_floor AND NOT returned_early;

-- Gates of the waits the engine drew for gloo executions (sql/analysis/20_cpu_nodes.sql,
-- cp_comm_waits: a thread idle over the execution's end that resumed near it, within 15 % of
-- its idle time) where the rule above found none: on a loaded CPU the records put the resume
-- more than $resume_us after the end, or before it (docs/method.md). The node that resumed
-- is the collective's gate on its rank, with its measured resume lag (net of the time the
-- scenario removes on its thread meanwhile), so the unchanged replay keeps its start.
CREATE OR REPLACE TEMP TABLE _wi_comm_wait_gates AS
WITH waits AS (
    SELECT g.group_index, n.window_index, n.seq AS gate_seq, n.run_id, n.rank, n.lane, n.start_us,
           c.transfer_us, c.end_us
    FROM edges AS x
    JOIN nodes AS s
        ON s.run_id = x.run_id AND s.rank = x.rank AND s.step = x.step AND s.method = x.method
       AND s.node_id = x.src AND s.kind = 'cpu' AND s.phase = 'Communication' AND starts_with(s.label, 'gloo:')
    JOIN wi_coupled_instances AS c
        ON c.run_id = x.run_id AND c.rank = x.rank AND c.executed_on = 'gloo_worker' AND NOT c.returned_early
       AND c.start_us = s.start_us AND c.end_us = s.end_us
    JOIN wi_coupled_groups AS g ON g.run_id = c.run_id AND g.pg = c.pg AND g.seq = c.seq
    JOIN wi_nodes AS n ON n.run_id = x.run_id AND n.rank = x.rank AND n.step = x.step AND n.node_id = x.dst
    WHERE x.method = 'ctda' AND x.type = 'sync'
      AND (g.group_index, n.window_index, n.seq) NOT IN (SELECT group_index, window_index, gate_seq FROM wi_coupled_gates)
),
at_start AS (
    SELECT w.*, _wi_removed_at(s, w.start_us) AS removed_at_start_us
    FROM waits AS w
    ASOF LEFT JOIN wi_shrink AS s
        ON s.run_id = w.run_id AND s.rank = w.rank AND s.lane = w.lane AND s.from_us <= w.start_us
),
lagged AS (
    SELECT w.*, w.start_us - w.end_us - (w.removed_at_start_us - _wi_removed_at(s, w.end_us)) AS resume_us
    FROM at_start AS w
    ASOF LEFT JOIN wi_shrink AS s
        ON s.run_id = w.run_id AND s.rank = w.rank AND s.lane = w.lane AND s.from_us <= w.end_us
),
latest AS (
    SELECT window_index, dst_seq, max(allowed_us) AS allowed_us FROM wi_edge_times GROUP BY ALL
),
held AS (
    SELECT w.*, w.end_us >= coalesce(l.allowed_us, '-infinity'::DOUBLE) AS binding
    FROM lagged AS w
    LEFT JOIN latest AS l ON l.window_index = w.window_index AND l.dst_seq = w.gate_seq
)
SELECT group_index, window_index, gate_seq,
       transfer_us + CASE WHEN binding THEN resume_us ELSE 0.0 END AS after_us, binding
FROM held;

INSERT INTO wi_coupled_gates SELECT * FROM _wi_comm_wait_gates;
