-- Cross-rank stage 3: the cross-rank critical path of every step, made of stretches of the
-- per-rank ctda paths. Start on the rank whose step ends last (aligned clocks) and go back
-- along its ctda path; where that path reaches a collective whose completion waited for a
-- later arrival on another rank (a gate), leave the rank at that arrival and continue on the
-- late rank's ctda path from its arrival, back to the next gate or its window start.
--
-- The path reaches a collective when its execution event is on the path (a NCCL kernel, a
-- synchronous call), when its send/recv call is on the path and blocked past the late arrival
-- until within $resume_tolerance_us of the end (a gloo recv_ waits inside the call), or
-- when the path resumes within $resume_tolerance_us after its end from a gap that contains
-- the end (the thread sat blocked in wait()). Rows keep the node's own
-- rank (node_rank) and own clock; gaps between rows are measured in aligned time.

-- Analysed windows and their ranks' clock offsets.
CREATE OR REPLACE TEMP TABLE cr_windows AS
SELECT w.run_id, w.rank, w.step, w.start_us, w.e2e_end_us, coalesce(t.clock_offset_us, 0) AS offset_us
FROM analysis_windows AS w
JOIN traces AS t USING (run_id, rank)
WHERE w.run_id IN (SELECT run_id FROM cr_runs);

-- The per-rank ctda paths with the gap before each row.
CREATE OR REPLACE TEMP TABLE cr_rank_paths AS
SELECT p.*, coalesce(lag(p.counted_end_us) OVER (PARTITION BY p.run_id, p.rank, p.step ORDER BY p.seq),
                     w.start_us) AS prev_end_us
FROM critical_path AS p
JOIN cr_windows AS w USING (run_id, rank, step)
WHERE p.method = 'ctda';

-- Gates: a collective on a rank's ctda path that waited for another rank's later arrival.
-- cut_us is the last arrival in this rank's clock; next_upper_us the same instant in the
-- late rank's clock (its arrival), where the path continues.
CREATE OR REPLACE TEMP TABLE cr_gates AS
WITH waited AS (
    SELECT i.run_id, w.step, i.rank, i.pg, i.seq, i.name, i.end_us, i.exec_event_id, i.cpu_event_id,
           i.last_rank AS next_rank,
           i.start_us + i.wait_us AS cut_us, late.start_us AS next_upper_us
    FROM collective_instances AS i
    JOIN collective_instances AS late
        ON late.run_id = i.run_id AND late.pg = i.pg AND late.seq = i.seq AND late.rank = i.last_rank
    -- the step of the rank's window that holds the collective's end
    JOIN cr_windows AS w ON w.run_id = i.run_id AND w.rank = i.rank
        AND i.end_us > w.start_us AND i.end_us <= w.e2e_end_us
    WHERE i.run_id IN (SELECT run_id FROM cr_runs) AND i.matched AND i.last_rank <> i.rank
      AND i.wait_us > $gate_min_wait_us
      AND EXISTS (SELECT 1 FROM cr_windows AS lw
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
       OR EXISTS (SELECT 1 FROM cr_rank_paths AS p
                  WHERE p.run_id = g.run_id AND p.rank = g.rank AND p.step = g.step
                    AND g.end_us BETWEEN p.prev_end_us AND p.counted_start_us
                    AND p.counted_start_us - g.end_us <= $resume_tolerance_us)
)
SELECT row_number() OVER (ORDER BY run_id, step, rank, end_us, pg, seq) AS gate_id, *
FROM reached;

-- For each gate, the latest gate of the late rank ending before the path enters that rank:
-- a table of its own, because DuckDB plans no ASOF join inside a recursive CTE (a CTE used
-- there may be inlined into it, which fails on larger jobs).
CREATE OR REPLACE TEMP TABLE cr_next_gates AS
SELECT g.gate_id, n.gate_id AS next_gate_id
FROM cr_gates AS g
ASOF LEFT JOIN cr_gates AS n
    ON n.run_id = g.run_id AND n.step = g.step AND n.rank = g.next_rank AND g.next_upper_us >= n.end_us;

-- Each step's start: the rank that finished last, and its latest gate before that end.
CREATE OR REPLACE TEMP TABLE cr_first_gates AS
WITH starts AS (
    SELECT run_id, step, arg_max(rank, e2e_end_us - offset_us) AS rank,
           arg_max(e2e_end_us, e2e_end_us - offset_us) AS upper_us
    FROM cr_windows
    GROUP BY run_id, step
)
SELECT s.*, g.gate_id
FROM starts AS s
ASOF LEFT JOIN cr_gates AS g
    ON g.run_id = s.run_id AND g.step = s.step AND g.rank = s.rank AND s.upper_us >= g.end_us;

-- The hops: from the last-finishing rank's step end, the latest gate ending before the
-- current bound, then the late rank from its arrival, and so on.
CREATE OR REPLACE TEMP TABLE cr_hops AS
WITH RECURSIVE
hops AS (
    SELECT run_id, step, 1 AS hop, rank, upper_us, gate_id FROM cr_first_gates
    UNION ALL
    SELECT h.run_id, h.step, h.hop + 1, g.next_rank, g.next_upper_us, n.next_gate_id
    FROM hops AS h
    JOIN cr_gates AS g ON g.gate_id = h.gate_id
    JOIN cr_next_gates AS n ON n.gate_id = g.gate_id
    WHERE h.hop < 10000
)
-- No hop goes back past the start of the step it explains (the first rank's window, in
-- aligned time): a late rank's window may begin before it, and counting that time would
-- count more than the step.
SELECT h.run_id, h.step, h.hop, h.rank, h.upper_us,
       least(h.upper_us, greatest(coalesce(g.cut_us, w.start_us), f.start_us - f.offset_us + w.offset_us))
           AS lower_us,
       g.pg AS gate_pg, g.seq AS gate_seq, f.start_us - f.offset_us AS step_aligned_start_us
FROM hops AS h
JOIN cr_windows AS w USING (run_id, rank, step)
JOIN cr_first_gates AS s ON s.run_id = h.run_id AND s.step = h.step
JOIN cr_windows AS f ON f.run_id = s.run_id AND f.rank = s.rank AND f.step = s.step
LEFT JOIN cr_gates AS g ON g.gate_id = h.gate_id;

-- Each hop's stretch of its rank's ctda path, clipped to [lower_us, upper_us]. A clipped
-- row keeps the share of its counted time that its counted window keeps.
CREATE OR REPLACE TEMP TABLE cr_path_rows AS
WITH clipped AS (
    SELECT h.run_id, h.step, h.hop, h.rank AS node_rank, p.seq AS rank_seq, p.node_id, p.kind,
           p.edge_type, p.gap_kind, p.counted_us,
           greatest(p.counted_start_us, h.lower_us) AS counted_start_us,
           least(p.counted_end_us, h.upper_us) AS counted_end_us,
           p.counted_end_us - p.counted_start_us AS full_window_us
    FROM cr_hops AS h
    JOIN cr_rank_paths AS p
        ON p.run_id = h.run_id AND p.rank = h.rank AND p.step = h.step
       AND p.counted_end_us >= h.lower_us AND p.counted_start_us <= h.upper_us
)
SELECT c.*, w.offset_us,
       CASE WHEN full_window_us > 0 THEN (counted_end_us - counted_start_us) / full_window_us ELSE 1 END AS kept_share
FROM clipped AS c
JOIN cr_windows AS w ON w.run_id = c.run_id AND w.rank = c.node_rank AND w.step = c.step
WHERE counted_end_us > counted_start_us OR full_window_us = 0;

CREATE OR REPLACE TEMP TABLE cr_path AS
WITH ordered AS (
    SELECT r.*, s.rank AS path_rank, s.step_aligned_start_us,
           row_number() OVER w AS seq,
           lag(r.counted_end_us - r.offset_us) OVER w AS prev_aligned_end_us,
           lag(r.hop) OVER w AS prev_hop,
           lead(r.hop) OVER w AS next_hop
    FROM cr_path_rows AS r
    JOIN (SELECT run_id, step, rank, step_aligned_start_us FROM cr_hops WHERE hop = 1) AS s USING (run_id, step)
    WINDOW w AS (PARTITION BY r.run_id, r.step ORDER BY r.hop DESC, r.rank_seq)
)
SELECT run_id, path_rank AS rank, step, 'cross_rank' AS method, seq, node_id,
       counted_start_us, counted_end_us, counted_us * kept_share AS counted_us, kind,
       CASE WHEN next_hop IS NOT NULL AND next_hop <> hop THEN 'cross_rank' ELSE edge_type END AS edge_type,
       -- gaps in aligned time; the first from the start of the step the path explains
       counted_start_us - offset_us - coalesce(prev_aligned_end_us, step_aligned_start_us) AS gap_before_us,
       CASE WHEN seq = 1 THEN 'slack_before'
            WHEN prev_hop <> hop OR gap_kind = 'slack_before' THEN 'between_nodes'
            ELSE gap_kind END AS gap_kind,
       node_rank, hop, rank_seq, kept_share
FROM ordered AS o;

-- Replace earlier cross-rank results of the analysed runs, then store the new ones.
DELETE FROM critical_path WHERE method = 'cross_rank' AND run_id IN (SELECT run_id FROM cr_runs);
DELETE FROM path_events WHERE method = 'cross_rank' AND run_id IN (SELECT run_id FROM cr_runs);
DELETE FROM cross_rank_segments WHERE run_id IN (SELECT run_id FROM cr_runs);

INSERT INTO critical_path (run_id, rank, step, method, seq, node_id, counted_start_us, counted_end_us,
                           counted_us, kind, edge_type, gap_before_us, gap_kind, node_rank)
SELECT run_id, rank, step, method, seq, node_id, counted_start_us, counted_end_us,
       counted_us, kind, edge_type, gap_before_us, gap_kind, node_rank
FROM cr_path;

INSERT INTO path_events (run_id, rank, step, method, node_id, event_id, name, cat, self_us, inclusive_us, node_rank)
SELECT p.run_id, p.rank, p.step, 'cross_rank', p.node_id, e.event_id, e.name, e.cat,
       e.self_us * p.kept_share, e.inclusive_us * p.kept_share, p.node_rank
FROM cr_path AS p
JOIN path_events AS e
    ON e.run_id = p.run_id AND e.rank = p.node_rank AND e.step = p.step AND e.method = 'ctda'
   AND e.node_id = p.node_id;

INSERT INTO cross_rank_segments
SELECT run_id, step, hop, rank, lower_us, upper_us, gate_pg, gate_seq
FROM cr_hops;
