-- The _wi_coupled_arrivals_raw statement of sql/whatif/45_coupling.sql as it was at 4aa6593,
-- before issue 32 replaced its `calls` join (every call with every window of its rank) and its
-- `anchored` join (every call with every node of its lane that started before it).
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_wi_coupled_arrivals_raw AS
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
