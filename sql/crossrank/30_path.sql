-- reads: analysis_windows, traces, cr_runs, critical_path, collective_instances, path_events,
--        cr_calls, runs
-- makes: _cr_windows(run_id, rank, step, start_us, e2e_end_us, offset_us)
-- makes: _cr_rank_paths(run_id, rank, step, method, seq, node_id, counted_start_us, counted_end_us,
--                      counted_us, kind, edge_type, gap_before_us, gap_kind, node_rank,
--                      queued_gap_us, queued_idle_us, prev_end_us)
-- makes: _cr_waited(run_id, step, rank, pg, seq, name, end_us, exec_event_id, cpu_event_id,
--                  next_rank, cut_us, next_upper_us, waited_row)
-- makes: _cr_gates(gate_id, run_id, step, rank, pg, seq, name, end_us, exec_event_id, cpu_event_id,
--                 next_rank, cut_us, next_upper_us)
-- makes: _cr_gate_ends(run_id, step, rank, end_us, gate_id)
-- makes: _cr_next_gates(gate_id, next_gate_id)
-- makes: _cr_first_gates(run_id, step, rank, upper_us, gate_id)
-- makes: _cr_hop_limit(hops)
-- makes: cr_hops(run_id, step, hop, rank, upper_us, lower_us, gate_pg, gate_seq,
--                step_aligned_start_us)
-- makes: _cr_path_rows(run_id, step, hop, node_rank, rank_seq, node_id, kind, edge_type, gap_kind,
--                     counted_us, counted_start_us, counted_end_us, full_window_us, offset_us,
--                     kept_share)
-- makes: _cr_path(run_id, rank, step, method, seq, node_id, counted_start_us, counted_end_us,
--                counted_us, kind, edge_type, gap_before_us, gap_kind, node_rank, hop, rank_seq,
--                kept_share)
-- makes: cr_notes(run, note)
-- writes: critical_path, path_events, cross_rank_segments
-- param: gate_min_wait_us DOUBLE
-- param: resume_tolerance_us DOUBLE
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
CREATE OR REPLACE TEMP TABLE _cr_windows AS
SELECT w.run_id, w.rank, w.step, w.start_us, w.e2e_end_us, coalesce(t.clock_offset_us, 0) AS offset_us
FROM analysis_windows AS w
JOIN traces AS t USING (run_id, rank)
WHERE w.run_id IN (SELECT run_id FROM cr_runs);

-- The per-rank ctda paths with the gap before each row.
CREATE OR REPLACE TEMP TABLE _cr_rank_paths AS
SELECT p.*, coalesce(lag(p.counted_end_us) OVER (PARTITION BY p.run_id, p.rank, p.step ORDER BY p.seq),
                     w.start_us) AS prev_end_us
FROM critical_path AS p
JOIN _cr_windows AS w USING (run_id, rank, step)
WHERE p.method = 'ctda';

-- Gates: a collective on a rank's ctda path that waited for another rank's later arrival.
-- cut_us is the last arrival in this rank's clock; next_upper_us the same instant in the
-- late rank's clock (its arrival), where the path continues.
--
-- Both range lookups go by positions from one ordered pass, as the nodes' python frames do
-- (cp_node_events, sql/analysis/60_counted.sql); a join on the rank or the step with the range
-- would compare every collective with every window of its rank, and every gate with every path
-- row of its step. A rank's waiting collectives in end order get positions, and each
-- window's bounds count the ends at or before them: the window's collectives are the
-- positions between. Then a step's gates in end order, and the gap before each path row (from
-- the row before's end to its start) counts the ends before it and at or before its start:
-- the gates that ended in the gap are the positions between. A rank's windows overlap little
-- and a path's gaps not at all, so each end is a candidate of one or two windows and gaps:
-- n log n in a rank's collectives and a step's path.
--
-- A collective is a gate only where it was still running when its last rank arrived, which
-- is what a wait_us above 0 says: 20_match.sql gives a side that ended before the last arrival
-- (within its causality tolerance) a wait of 0. Matching rules that out for every matched
-- instance but a send, so this drops the sends that returned before their receiver arrived:
-- NCCL or gloo buffered the message and the sender waited for nothing. Hopping there would put
-- the receiver's time before its arrival on the path in place of the sender's own work.
--
-- Waiting collectives: each rank's collectives that waited for a later rank, in the step of
-- the rank's window that holds their end.
CREATE OR REPLACE TEMP TABLE _cr_waited AS
WITH waiting AS MATERIALIZED (
    SELECT i.run_id, i.rank, i.pg, i.seq, i.name, i.end_us, i.exec_event_id, i.cpu_event_id,
           i.last_rank AS next_rank,
           i.start_us + (late.aligned_start_us - i.aligned_start_us) AS cut_us, late.start_us AS next_upper_us,
           row_number() OVER () AS waiting_row
    FROM collective_instances AS i
    JOIN collective_instances AS late
        ON late.run_id = i.run_id AND late.pg = i.pg AND late.seq = i.seq AND late.rank = i.last_rank
    WHERE i.run_id IN (SELECT run_id FROM cr_runs) AND i.matched AND i.last_rank <> i.rank
      AND i.wait_us > $gate_min_wait_us
      -- ranks that made it in different steps (numbered differently): the path follows one
      -- step number on every rank, and the late rank's arrival is in another of its windows
      AND late.step IS NOT DISTINCT FROM i.step
),
windows AS MATERIALIZED (
    SELECT *, row_number() OVER () AS window_row FROM _cr_windows
),
-- ties: an end at a window's start is not in it, one at its end is: the bounds go after the ends
end_positions AS MATERIALIZED (
    SELECT *, (sum(is_end) OVER (PARTITION BY run_id, rank ORDER BY t, is_end DESC, waiting_row
                                 ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, end_us AS t, 1 AS is_end, waiting_row, NULL::BIGINT AS window_row, NULL AS bound,
               NULL::DOUBLE AS start_us, NULL::DOUBLE AS e2e_end_us
        FROM waiting
        UNION ALL
        SELECT run_id, rank, start_us, 0, NULL, window_row, 'start', start_us, e2e_end_us FROM windows
        UNION ALL
        SELECT run_id, rank, e2e_end_us, 0, NULL, window_row, 'end', start_us, e2e_end_us FROM windows
    )
),
window_ends AS (
    SELECT window_row, run_id, rank, start_us, e2e_end_us,
           unnest(range(max(position) FILTER (WHERE bound = 'start') + 1,
                        max(position) FILTER (WHERE bound = 'end') + 1)) AS position
    FROM end_positions
    WHERE is_end = 0
    GROUP BY window_row, run_id, rank, start_us, e2e_end_us
)
-- (every check goes with a positions' join, on the values the positions carry: with both
-- sides' tables joined in, the planner may compare them directly, every one with every one)
SELECT i.run_id, w.step, i.rank, i.pg, i.seq, i.name, i.end_us, i.exec_event_id, i.cpu_event_id,
       i.next_rank, i.cut_us, i.next_upper_us, row_number() OVER () AS waited_row
FROM window_ends AS p
JOIN end_positions AS e USING (run_id, rank, position)
JOIN waiting AS i ON i.waiting_row = e.waiting_row
-- the step of the rank's window that holds the collective's end
JOIN windows AS w ON w.window_row = p.window_row
WHERE e.is_end = 1 AND e.t > p.start_us AND e.t <= p.e2e_end_us
  AND EXISTS (SELECT 1 FROM _cr_windows AS lw
              WHERE lw.run_id = i.run_id AND lw.rank = i.next_rank AND lw.step = w.step);

-- Gates: the waiting collectives above that the rank's ctda path reached.
CREATE OR REPLACE TEMP TABLE _cr_gates AS
WITH paths AS MATERIALIZED (
    SELECT run_id, rank, step, prev_end_us, counted_start_us, row_number() OVER () AS path_row
    FROM _cr_rank_paths
),
-- ties: an end at the gap's start or end is in it
gap_positions AS MATERIALIZED (
    SELECT *, (sum(is_end) OVER (PARTITION BY run_id, rank, step ORDER BY t, bound_order, waited_row
                                 ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, step, end_us AS t, 1 AS bound_order, 1 AS is_end, waited_row, NULL::BIGINT AS path_row,
               NULL::DOUBLE AS prev_end_us, NULL::DOUBLE AS counted_start_us
        FROM _cr_waited
        UNION ALL
        SELECT run_id, rank, step, prev_end_us, 0, 0, NULL, path_row, prev_end_us, counted_start_us FROM paths
        UNION ALL
        SELECT run_id, rank, step, counted_start_us, 2, 0, NULL, path_row, prev_end_us, counted_start_us FROM paths
    )
),
-- gates the path resumed after: it left a gap holding the end within the tolerance
resumed AS (
    SELECT DISTINCT e.waited_row
    FROM (SELECT run_id, rank, step, prev_end_us, counted_start_us,
                 unnest(range(max(position) FILTER (WHERE bound_order = 0) + 1,
                              max(position) FILTER (WHERE bound_order = 2) + 1)) AS position
          FROM gap_positions
          WHERE is_end = 0
          GROUP BY path_row, run_id, rank, step, prev_end_us, counted_start_us) AS r
    JOIN gap_positions AS e USING (run_id, rank, step, position)
    WHERE e.is_end = 1
      AND e.t BETWEEN r.prev_end_us AND r.counted_start_us
      AND r.counted_start_us - e.t <= $resume_tolerance_us
),
reached AS (
    SELECT g.* FROM _cr_waited AS g
    WHERE EXISTS (SELECT 1 FROM path_events AS e
                  WHERE e.run_id = g.run_id AND e.rank = g.rank AND e.step = g.step AND e.method = 'ctda'
                    AND e.event_id = g.exec_event_id)
       OR EXISTS (SELECT 1 FROM path_events AS e
                  JOIN cr_calls AS c ON c.run_id = e.run_id AND c.rank = e.rank AND c.event_id = e.event_id
                  WHERE e.run_id = g.run_id AND e.rank = g.rank AND e.step = g.step AND e.method = 'ctda'
                    AND e.event_id = g.cpu_event_id AND collective_key(g.name) IN ('send', 'recv')
                    AND c.end_us >= g.cut_us
                    AND c.end_us >= g.end_us - $resume_tolerance_us)
       OR g.waited_row IN (SELECT waited_row FROM resumed)
)
SELECT row_number() OVER (ORDER BY run_id, step, rank, end_us, pg, seq) AS gate_id, * EXCLUDE (waited_row)
FROM reached;

-- For each gate, the latest gate of the late rank ending before the path enters that rank:
-- a table of its own, because DuckDB plans no ASOF join inside a recursive CTE (a CTE used
-- there may be inlined into it, which fails on larger jobs).
--
-- Gates of a rank that end at one instant: an ASOF join takes any one of them, so each such
-- instant keeps one, the last in gate_id order (_cr_gate_ends), and the path is the same on
-- every analysis.
CREATE OR REPLACE TEMP TABLE _cr_gate_ends AS
SELECT run_id, step, rank, end_us, max(gate_id) AS gate_id
FROM _cr_gates
GROUP BY run_id, step, rank, end_us;

CREATE OR REPLACE TEMP TABLE _cr_next_gates AS
SELECT g.gate_id, n.gate_id AS next_gate_id
FROM _cr_gates AS g
ASOF LEFT JOIN _cr_gate_ends AS n
    ON n.run_id = g.run_id AND n.step = g.step AND n.rank = g.next_rank AND g.next_upper_us >= n.end_us;

-- Each step's start: the rank that finished last (of ranks that finished at one instant, the
-- lowest: an arbitrary one made the path differ from one analysis to the next), and its
-- latest gate before that end.
CREATE OR REPLACE TEMP TABLE _cr_first_gates AS
WITH starts AS (
    SELECT run_id, step, arg_max(rank, (e2e_end_us - offset_us, -rank)) AS rank,
           arg_max(e2e_end_us, (e2e_end_us - offset_us, -rank)) AS upper_us
    FROM _cr_windows
    GROUP BY run_id, step
)
SELECT s.*, g.gate_id
FROM starts AS s
ASOF LEFT JOIN _cr_gate_ends AS g
    ON g.run_id = s.run_id AND g.step = s.step AND g.rank = s.rank AND s.upper_us >= g.end_us;

-- A step's path takes each of its gates at most once, going back in time: it needs no more
-- rounds than the largest step has gates (a fixed cap would cut longer paths short), and
-- stops there should gates ever loop.
CREATE OR REPLACE TEMP TABLE _cr_hop_limit AS
SELECT coalesce(max(gates), 0) + 1 AS hops
FROM (SELECT count(*) AS gates FROM _cr_gates GROUP BY run_id, step);

-- The hops: from the last-finishing rank's step end, the latest gate ending before the
-- current bound, then the late rank from its arrival, and so on.
CREATE OR REPLACE TEMP TABLE cr_hops AS
WITH RECURSIVE
hops AS (
    SELECT run_id, step, 1 AS hop, rank, upper_us, gate_id FROM _cr_first_gates
    UNION ALL
    SELECT h.run_id, h.step, h.hop + 1, g.next_rank, g.next_upper_us, n.next_gate_id
    FROM hops AS h
    JOIN _cr_gates AS g ON g.gate_id = h.gate_id
    JOIN _cr_next_gates AS n ON n.gate_id = g.gate_id
    JOIN _cr_hop_limit AS l ON h.hop < l.hops
)
-- No hop goes back past the start of the step it explains (the first rank's window, in
-- aligned time): a late rank's window may begin before it, and counting that time would
-- count more than the step.
SELECT h.run_id, h.step, h.hop, h.rank, h.upper_us,
       least(h.upper_us, greatest(coalesce(g.cut_us, w.start_us), f.start_us - f.offset_us + w.offset_us))
           AS lower_us,
       g.pg AS gate_pg, g.seq AS gate_seq, f.start_us - f.offset_us AS step_aligned_start_us
FROM hops AS h
JOIN _cr_windows AS w USING (run_id, rank, step)
JOIN _cr_first_gates AS s ON s.run_id = h.run_id AND s.step = h.step
JOIN _cr_windows AS f ON f.run_id = s.run_id AND f.rank = s.rank AND f.step = s.step
LEFT JOIN _cr_gates AS g ON g.gate_id = h.gate_id;

-- Each hop's stretch of its rank's ctda path, clipped to [lower_us, upper_us]. A clipped
-- row keeps the share of its counted time that its counted window keeps.
--
-- The rows a hop's stretch overlaps are those that start inside it and those that start
-- before it and run into it. A join on the step with the overlap would compare every hop with
-- every path row of its rank's step (quadratic where ranks take turns to be late and the path
-- hops at every collective). Instead both go by positions from one ordered pass per
-- rank's step: the rows in start order, each stretch's bounds counting the starts before its
-- lower bound and at or before its upper bound (the rows starting inside are the positions
-- between); and the stretches in lower-bound order, each row's start and end counting the
-- lower bounds at or before them (the stretches whose lower bound the row runs over are the
-- positions between). A path's rows do not overlap, nor do a rank's stretches of one step,
-- so each row is a candidate of the stretches that hold it only.
CREATE OR REPLACE TEMP TABLE _cr_path_rows AS
WITH hops AS MATERIALIZED (
    SELECT *, row_number() OVER () AS hop_row FROM cr_hops
),
paths AS MATERIALIZED (
    SELECT *, row_number() OVER () AS path_row FROM _cr_rank_paths
),
-- row starts inside a stretch; ties: a start at either bound is inside. (Each check goes
-- with a positions' join, on the values the positions carry: with the hops and the path rows
-- joined in, the planner may compare them directly, every one with every one.)
start_positions AS MATERIALIZED (
    SELECT *, (sum(is_row) OVER (PARTITION BY run_id, rank, step ORDER BY t, bound_order, path_row
                                 ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, step, counted_start_us AS t, 1 AS bound_order, 1 AS is_row, path_row,
               NULL::BIGINT AS hop_row, counted_start_us AS row_start_us, counted_end_us AS row_end_us,
               NULL::DOUBLE AS lower_us, NULL::DOUBLE AS upper_us
        FROM paths
        UNION ALL
        SELECT run_id, rank, step, lower_us, 0, 0, NULL, hop_row, NULL, NULL, lower_us, upper_us FROM hops
        UNION ALL
        SELECT run_id, rank, step, upper_us, 2, 0, NULL, hop_row, NULL, NULL, lower_us, upper_us FROM hops
    )
),
starting_inside AS (
    SELECT r.hop_row, p.path_row
    FROM (SELECT hop_row, run_id, rank, step, lower_us, upper_us,
                 unnest(range(max(position) FILTER (WHERE bound_order = 0) + 1,
                              max(position) FILTER (WHERE bound_order = 2) + 1)) AS position
          FROM start_positions
          WHERE is_row = 0
          GROUP BY hop_row, run_id, rank, step, lower_us, upper_us) AS r
    JOIN start_positions AS p USING (run_id, rank, step, position)
    WHERE p.is_row = 1 AND p.row_end_us >= r.lower_us AND p.row_start_us <= r.upper_us
),
-- lower bounds a row runs over; ties: a lower bound at the row's start is not (the row
-- starts inside that stretch), one at its end is
lower_positions AS MATERIALIZED (
    SELECT *, (sum(is_hop) OVER (PARTITION BY run_id, rank, step ORDER BY t, is_hop DESC, hop_row
                                 ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, step, lower_us AS t, 1 AS is_hop, hop_row, NULL::BIGINT AS path_row, NULL AS bound,
               NULL::DOUBLE AS row_start_us, NULL::DOUBLE AS row_end_us, lower_us, upper_us
        FROM hops
        UNION ALL
        SELECT run_id, rank, step, counted_start_us, 0, NULL, path_row, 'start', counted_start_us, counted_end_us,
               NULL, NULL
        FROM paths
        UNION ALL
        SELECT run_id, rank, step, counted_end_us, 0, NULL, path_row, 'end', counted_start_us, counted_end_us,
               NULL, NULL
        FROM paths
    )
),
running_into AS (
    SELECT h.hop_row, r.path_row
    FROM (SELECT path_row, run_id, rank, step, row_start_us, row_end_us,
                 unnest(range(max(position) FILTER (WHERE bound = 'start') + 1,
                              max(position) FILTER (WHERE bound = 'end') + 1)) AS position
          FROM lower_positions
          WHERE is_hop = 0
          GROUP BY path_row, run_id, rank, step, row_start_us, row_end_us) AS r
    JOIN lower_positions AS h USING (run_id, rank, step, position)
    WHERE h.is_hop = 1 AND r.row_end_us >= h.lower_us AND r.row_start_us <= h.upper_us
),
clipped AS (
    SELECT h.run_id, h.step, h.hop, h.rank AS node_rank, p.seq AS rank_seq, p.node_id, p.kind,
           p.edge_type, p.gap_kind, p.counted_us,
           greatest(p.counted_start_us, h.lower_us) AS counted_start_us,
           least(p.counted_end_us, h.upper_us) AS counted_end_us,
           p.counted_end_us - p.counted_start_us AS full_window_us
    FROM (SELECT * FROM starting_inside UNION ALL SELECT * FROM running_into) AS o
    JOIN hops AS h USING (hop_row)
    JOIN paths AS p USING (path_row)
)
SELECT c.*, w.offset_us,
       CASE WHEN full_window_us > 0 THEN (counted_end_us - counted_start_us) / full_window_us ELSE 1 END AS kept_share
FROM clipped AS c
JOIN _cr_windows AS w ON w.run_id = c.run_id AND w.rank = c.node_rank AND w.step = c.step
WHERE counted_end_us > counted_start_us OR full_window_us = 0;

CREATE OR REPLACE TEMP TABLE _cr_path AS
WITH ordered AS (
    SELECT r.*, s.rank AS path_rank, s.step_aligned_start_us,
           row_number() OVER w AS seq,
           lag(r.counted_end_us - r.offset_us) OVER w AS prev_aligned_end_us,
           lag(r.hop) OVER w AS prev_hop,
           lead(r.hop) OVER w AS next_hop
    FROM _cr_path_rows AS r
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
FROM _cr_path;

INSERT INTO path_events (run_id, rank, step, method, node_id, event_id, name, cat, self_us, inclusive_us, node_rank)
SELECT p.run_id, p.rank, p.step, 'cross_rank', p.node_id, e.event_id, e.name, e.cat,
       e.self_us * p.kept_share, e.inclusive_us * p.kept_share, p.node_rank
FROM _cr_path AS p
JOIN path_events AS e
    ON e.run_id = p.run_id AND e.rank = p.node_rank AND e.step = p.step AND e.method = 'ctda'
   AND e.node_id = p.node_id;

INSERT INTO cross_rank_segments
SELECT run_id, step, hop, rank, lower_us, upper_us, gate_pg, gate_seq
FROM cr_hops;

-- Notes for analyze's summary. Matched collectives whose ranks made them in different steps
-- (ranks that number their steps differently): the path follows one step on every rank, so it
-- cannot cross at them, and without a note cross_rank would silently equal ctda.
CREATE OR REPLACE TEMP TABLE cr_notes AS
WITH split AS (
    SELECT run_id, count(*) AS collectives
    FROM (SELECT run_id, pg, seq FROM collective_instances
          WHERE run_id IN (SELECT run_id FROM cr_runs) AND matched
          GROUP BY ALL HAVING count(DISTINCT step) > 1 OR count(step) < count(*))
    GROUP BY run_id
),
ranges AS (
    SELECT run_id, string_agg('rank ' || rank || ' ' || CASE WHEN lo = hi THEN lo::VARCHAR ELSE lo || '-' || hi END,
                              ', ' ORDER BY rank) AS steps
    FROM (SELECT run_id, rank, min(step) AS lo, max(step) AS hi FROM _cr_windows GROUP BY ALL)
    GROUP BY run_id
)
SELECT r.name AS run,
       'run ''' || r.name || ''': ' || s.collectives
       || CASE WHEN s.collectives = 1 THEN ' matched collective falls' ELSE ' matched collectives fall' END
       || ' in different steps on their ranks (steps: ' || coalesce(g.steps, 'none') || ')'
       || '; the cross-rank path does not cross at them' AS note
FROM split AS s
JOIN runs AS r USING (run_id)
LEFT JOIN ranges AS g USING (run_id);
