-- The _cr_gates statement of sql/crossrank/30_path.sql as it was at 4aa6593, before issue 32
-- replaced its joins of every collective with every window of its rank and with every path row
-- of its step.
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_cr_gates AS
WITH waited AS (
    SELECT i.run_id, w.step, i.rank, i.pg, i.seq, i.name, i.end_us, i.exec_event_id, i.cpu_event_id,
           i.last_rank AS next_rank,
           i.start_us + i.wait_us AS cut_us, late.start_us AS next_upper_us
    FROM collective_instances AS i
    JOIN collective_instances AS late
        ON late.run_id = i.run_id AND late.pg = i.pg AND late.seq = i.seq AND late.rank = i.last_rank
    -- the step of the rank's window that holds the collective's end
    JOIN _cr_windows AS w ON w.run_id = i.run_id AND w.rank = i.rank
        AND i.end_us > w.start_us AND i.end_us <= w.e2e_end_us
    WHERE i.run_id IN (SELECT run_id FROM cr_runs) AND i.matched AND i.last_rank <> i.rank
      AND i.wait_us > $gate_min_wait_us
      AND EXISTS (SELECT 1 FROM _cr_windows AS lw
                  WHERE lw.run_id = i.run_id AND lw.rank = i.last_rank AND lw.step = w.step)
),
reached AS (
    SELECT g.* FROM waited AS g
    WHERE EXISTS (SELECT 1 FROM path_events AS e
                  WHERE e.run_id = g.run_id AND e.rank = g.rank AND e.step = g.step AND e.method = 'ctda'
                    AND e.event_id = g.exec_event_id)
       OR EXISTS (SELECT 1 FROM path_events AS e
                  JOIN cr_calls AS c ON c.run_id = e.run_id AND c.rank = e.rank AND c.event_id = e.event_id
                  WHERE e.run_id = g.run_id AND e.rank = g.rank AND e.step = g.step AND e.method = 'ctda'
                    AND e.event_id = g.cpu_event_id AND collective_key(g.name) IN ('send', 'recv')
                    AND c.end_us >= g.cut_us
                    AND c.end_us >= g.end_us - $resume_tolerance_us)
       OR EXISTS (SELECT 1 FROM _cr_rank_paths AS p
                  WHERE p.run_id = g.run_id AND p.rank = g.rank AND p.step = g.step
                    AND g.end_us BETWEEN p.prev_end_us AND p.counted_start_us
                    AND p.counted_start_us - g.end_us <= $resume_tolerance_us)
)
SELECT row_number() OVER (ORDER BY run_id, step, rank, end_us, pg, seq) AS gate_id, *
FROM reached;
