-- The INSERT INTO wi_coupled_gates of sql/whatif/cluster_apply.sql as it was at 4aa6593, before
-- issue 32 replaced its joins of every call with every window of its rank and every node of its
-- lane. Its rows go to a table of their own (old_cluster_gates) instead of wi_coupled_gates.
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_cluster_gates AS
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
),
lane_nodes AS (
    SELECT window_index, seq, lane, start_us,
           coalesce(lag(end_us) OVER (PARTITION BY window_index, lane ORDER BY start_us, node_id), window_start_us)
               AS idle_from_us
    FROM wi_nodes WHERE kind = 'cpu'
),
first_after AS (
    SELECT c.group_index, c.window_index, c.lane, c.end_us, any_value(t.transfer_us) AS transfer_us,
           arg_min(n.seq, n.start_us) AS gate_seq, min(n.start_us) AS gate_start_us,
           arg_min(n.idle_from_us, n.start_us) AS idle_from_us
    FROM calls AS c
    JOIN wi_cluster_transfers AS t USING (run_id, pg, seq)
    JOIN lane_nodes AS n
        ON n.window_index = c.window_index AND n.lane = c.lane AND n.start_us >= c.end_us AND n.start_us > c.enqueue_us
    WHERE (c.group_index, c.rank) NOT IN (SELECT group_index, rank FROM gated)
    GROUP BY c.group_index, c.window_index, c.lane, c.end_us
),
-- the resume lag counts from the last collective that ended while the thread sat idle (DDP
-- waits for its buckets in order: an earlier bucket's end is no resume)
last_ends AS (
    SELECT f.window_index, f.gate_seq, max(c.end_us) AS last_end_us
    FROM first_after AS f
    JOIN calls AS c
        ON c.window_index = f.window_index AND c.lane = f.lane AND c.end_us >= f.idle_from_us
       AND c.end_us <= f.gate_start_us
    GROUP BY ALL
)
SELECT f.group_index, f.window_index, f.gate_seq,
       f.transfer_us + CASE WHEN f.idle_from_us <= f.end_us THEN f.gate_start_us - l.last_end_us ELSE 0.0 END
           AS after_us,
       f.idle_from_us <= f.end_us AS binding
FROM first_after AS f
LEFT JOIN last_ends AS l USING (window_index, gate_seq);
