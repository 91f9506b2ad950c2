-- The wi_coupled_gates statement of sql/whatif/45_coupling.sql as it was at 4aa6593, before
-- issue 32 replaced its `candidates` join (every gloo or synchronous collective with every CPU
-- node of its rank) with positions from one ordered pass.
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_wi_coupled_gates AS
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
FROM wi_coupled_arrivals WHERE pre_floor;
