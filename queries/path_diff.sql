-- name: path_diff
-- description: why run_b's median step differs from run_a's along the critical paths: path time per annotation, op, kernel and phase (appeared, vanished, grew, shrank), then the remainder not on the path and the step
-- param: run_a VARCHAR = NULL     the baseline run (required)
-- param: run_b VARCHAR = NULL     the run compared with it (required)
-- param: rank INTEGER = NULL      one rank's steps and path; the job's step (max over ranks) and the cross-rank path when NULL
-- key: kind, label, delta_us
--
-- The one definition of the path diff: ctda_sql.advice.diff runs this file and shapes its rows
-- into the JSON document (the `unexplained` and `step` rows become its remainder and steps).
-- Reads runs, traces, threads, events, analysis_windows, critical_path, path_events, nodes.
--
-- Each run is seen through its median step: the step whose time (a rank's window; for a job,
-- the max over ranks) is closest to the median, the lower one on a tie. That step's path is cut
-- into pieces that count each microsecond once: time on a main/autograd thread inside a user
-- annotation goes to the innermost one (events, idle and gaps alike); outside annotations, a
-- CPU event's counted self time goes to its op, a GPU event's to its kernel, idle inside a node
-- to the node's phase, and a gap while a helper thread's annotation ran (a DataLoader's stall) to
-- a wait on it; other gaps are not on the path and fall to the remainder. Values are whole
-- microseconds, so rows + remainder == step difference exactly.
WITH wanted AS (
    SELECT side, run FROM (VALUES
        ('a', CASE WHEN $run_a IS NULL OR $run_b IS NULL THEN error('path_diff needs run_a and run_b')
                   ELSE $run_a END),
        ('b', $run_b)) AS w(side, run)
),
sides AS (
    SELECT w.side, w.run, r.run_id, t.ranks, t.has_rank
    FROM wanted AS w
    JOIN runs AS r ON r.name = w.run
    JOIN (SELECT run_id, count(*) AS ranks, coalesce(bool_or(rank = $rank), false) AS has_rank
          FROM traces GROUP BY run_id) AS t USING (run_id)
),
-- one row always (an empty join downstream would skip a check made inside it)
rank_check AS (
    SELECT CASE WHEN $rank IS NULL OR coalesce(bool_and(has_rank), true) THEN true
                ELSE error('path_diff: no rank ' || $rank || ' in '
                           || CASE WHEN count(DISTINCT run) FILTER (WHERE NOT has_rank) > 1 THEN 'runs ' ELSE 'run ' END
                           || string_agg(DISTINCT run, ', ') FILTER (WHERE NOT has_rank)) END AS ok
    FROM sides
),
-- the job's step: the slowest rank's window of each step (or the one rank's window)
job_steps AS (
    SELECT s.side, s.run_id, s.ranks, w.step, max(w.window_us) AS step_us,
           arg_max(w.rank, w.window_us) AS slowest_rank
    FROM sides AS s
    JOIN analysis_windows AS w USING (run_id)
    WHERE $rank IS NULL OR w.rank = $rank
    GROUP BY ALL
),
medians AS (
    SELECT side, median(step_us) AS median_us FROM job_steps GROUP BY side
),
-- the path of the chosen step: cross-rank where the run has several ranks and it was analysed,
-- else ctda on the given rank or the slowest one; rank-prefixed labels for a job's path
chosen AS (
    SELECT j.side, j.run_id, j.step, m.median_us,
           CASE WHEN j.ranks > 1 AND $rank IS NULL AND cr.step IS NOT NULL THEN 'cross_rank' ELSE 'ctda' END AS method,
           coalesce($rank, j.slowest_rank) AS path_rank,
           j.ranks > 1 AND $rank IS NULL AS by_rank
    FROM job_steps AS j
    JOIN medians AS m USING (side)
    LEFT JOIN (SELECT DISTINCT run_id, step FROM critical_path WHERE method = 'cross_rank') AS cr
        ON cr.run_id = j.run_id AND cr.step = j.step
    QUALIFY row_number() OVER (PARTITION BY j.side ORDER BY abs(j.step_us - m.median_us), j.step_us, j.step) = 1
),
path AS (
    SELECT c.side, c.run_id, c.by_rank, p.rank, p.step, p.method, p.seq, p.node_id, p.kind,
           coalesce(p.node_rank, p.rank) AS on_rank,
           p.counted_start_us - p.gap_before_us AS gap_start_us, p.counted_start_us, p.counted_end_us
    FROM chosen AS c
    JOIN critical_path AS p
        ON p.run_id = c.run_id AND p.step = c.step AND p.method = c.method
       AND (c.method = 'cross_rank' OR p.rank = c.path_rank)
),
-- the stretch after the last node to the end of its rank's window, a gap like the others
tails AS (
    SELECT p.side, p.on_rank, p.counted_end_us AS start_us, w.start_us + w.window_us AS end_us
    FROM path AS p
    JOIN analysis_windows AS w ON w.run_id = p.run_id AND w.rank = p.on_rank AND w.step = p.step
    QUALIFY p.seq = max(p.seq) OVER (PARTITION BY p.side)
),
-- CPU pieces of the path: the gap before each node and the node's counted window, none empty
-- (pieces do not overlap: each stretch of time finds its piece by its start)
cpu_pieces AS (
    SELECT side, on_rank, node_id, 'gap' AS part, gap_start_us AS start_us, counted_start_us AS end_us
    FROM path WHERE kind = 'cpu' AND counted_start_us > gap_start_us
    UNION ALL
    SELECT side, on_rank, node_id, 'span', counted_start_us, counted_end_us
    FROM path WHERE kind = 'cpu' AND counted_end_us > counted_start_us
    UNION ALL
    SELECT side, on_rank, NULL, 'gap', start_us, end_us FROM tails WHERE end_us > start_us
),
extent AS (
    SELECT side, run_id, on_rank, min(gap_start_us) AS lo_us,
           greatest(max(counted_end_us), max(t.end_us)) AS hi_us
    FROM path LEFT JOIN tails AS t USING (side, on_rank)
    GROUP BY ALL
),
-- annotations of the threads the path follows (main and autograd), and of helper threads
-- (a DataLoader's, a collective's worker), which name only the gaps the path waited through
annotations AS (
    SELECT x.side, x.on_rank, a.pid || '/' || a.tid AS lane, t.role IN ('main', 'autograd') AS followed,
           a.name, a.ts_us AS start_us, a.end_us
    FROM extent AS x
    JOIN events AS a
        ON a.run_id = x.run_id AND a.rank = x.on_rank AND a.ph = 'X' AND is_annotation_event(a.cat, a.name)
       AND NOT starts_with(a.name, 'ProfilerStep#') AND a.ts_us < x.hi_us AND a.end_us > x.lo_us
    JOIN threads AS t
        ON t.run_id = a.run_id AND t.rank = a.rank AND t.pid = a.pid AND t.tid = a.tid AND t.role <> 'stream'
),
-- each thread's annotations nest: walk their starts and ends in order with the stack's depth
-- (ends before starts at one time, outer starts first, inner ends first)
marks AS (
    SELECT *, row_number() OVER w AS pos, sum(delta) OVER (w ROWS UNBOUNDED PRECEDING) AS depth
    FROM (SELECT side, on_rank, lane, followed, start_us AS t, 1 AS delta, name, start_us, end_us FROM annotations
          UNION ALL
          SELECT side, on_rank, lane, followed, end_us, -1, name, start_us, end_us FROM annotations)
    WINDOW w AS (PARTITION BY side, on_rank, lane
                 ORDER BY t, delta, CASE WHEN delta = 1 THEN -end_us ELSE -start_us END, name)
),
-- the innermost annotation open on a thread from each mark to its next: the one just started,
-- or after an end the latest start at the depth left open
lane_stretches AS (
    SELECT m.side, m.on_rank, m.lane, m.followed, m.t AS start_us,
           lead(m.t) OVER (PARTITION BY m.side, m.on_rank, m.lane ORDER BY m.pos) AS end_us,
           CASE WHEN m.delta = 1 THEN m.name ELSE o.name END AS label,
           CASE WHEN m.delta = 1 THEN m.start_us ELSE o.start_us END AS label_start_us
    FROM marks AS m
    ASOF LEFT JOIN (SELECT side, on_rank, lane, depth, pos, name, start_us FROM marks WHERE delta = 1) AS o
        ON o.side = m.side AND o.on_rank = m.on_rank AND o.lane = m.lane AND o.depth = m.depth AND m.pos >= o.pos
    -- marks at one time leave empty stretches: only the last one there lasts
    QUALIFY lead(m.t) OVER (PARTITION BY m.side, m.on_rank, m.lane ORDER BY m.pos) > m.t
),
-- the rank's path time cut at every annotation and piece boundary; each stretch lies in at
-- most one piece and is named for the innermost annotation of the followed threads (latest
-- start), and for the innermost one of the helper threads
bounds AS (
    SELECT DISTINCT side, on_rank, t
    FROM (SELECT side, on_rank, start_us AS t FROM annotations
          UNION ALL SELECT side, on_rank, end_us FROM annotations
          UNION ALL SELECT side, on_rank, start_us FROM cpu_pieces
          UNION ALL SELECT side, on_rank, end_us FROM cpu_pieces)
),
stretches AS (
    SELECT side, on_rank, t AS start_us, lead(t) OVER (PARTITION BY side, on_rank ORDER BY t) AS end_us
    FROM bounds
    QUALIFY end_us IS NOT NULL
),
named_stretches AS (
    SELECT s.side, s.on_rank, s.start_us, s.end_us,
           arg_max(l.label, l.label_start_us)
               FILTER (WHERE l.followed AND l.label IS NOT NULL AND s.start_us < l.end_us) AS label,
           arg_max(l.label, l.label_start_us)
               FILTER (WHERE NOT l.followed AND l.label IS NOT NULL AND s.start_us < l.end_us) AS helper_label
    FROM stretches AS s
    JOIN (SELECT DISTINCT side, on_rank, lane FROM annotations) AS lanes USING (side, on_rank)
    ASOF JOIN lane_stretches AS l
        ON l.side = s.side AND l.on_rank = s.on_rank AND l.lane = lanes.lane AND s.start_us >= l.start_us
    GROUP BY ALL
),
-- path time inside an annotation of a followed thread; a gap outside them, while a helper
-- thread's annotation ran, is a wait on it (inferred from timing, as what-if's queue waits)
annotated AS (
    SELECT p.side, p.on_rank, p.node_id, p.part,
           CASE WHEN n.label IS NOT NULL THEN 'annotation' ELSE 'wait' END AS kind,
           coalesce(n.label, n.helper_label) AS label, n.end_us - n.start_us AS us
    FROM named_stretches AS n
    ASOF JOIN cpu_pieces AS p
        ON p.side = n.side AND p.on_rank = n.on_rank AND n.start_us >= p.start_us
    WHERE n.start_us < p.end_us
      AND (n.label IS NOT NULL OR (p.part = 'gap' AND n.helper_label IS NOT NULL))
),
-- counted events of the chosen steps' paths, with their node's kind and phase
counted AS (
    SELECT c.side, e.node_id, coalesce(e.node_rank, e.rank) AS on_rank, e.event_id, e.name, e.self_us
    FROM chosen AS c
    JOIN path_events AS e
        ON e.run_id = c.run_id AND e.step = c.step AND e.method = c.method
       AND (c.method = 'cross_rank' OR e.rank = c.path_rank)
),
placed AS (
    SELECT k.side, k.on_rank, k.node_id, n.kind, k.name, k.self_us,
           (v.ts_us + v.end_us) / 2 AS mid_us
    FROM counted AS k
    JOIN chosen AS c USING (side)
    JOIN nodes AS n
        ON n.run_id = c.run_id AND n.rank = k.on_rank AND n.step = c.step AND n.method = 'ctda'
       AND n.node_id = k.node_id
    JOIN events AS v ON v.run_id = c.run_id AND v.rank = k.on_rank AND v.event_id = k.event_id
),
-- events outside every annotation keep their own name (annotated ones are in `annotated`)
loose_events AS (
    SELECT p.side, p.on_rank, p.node_id, p.kind, p.name, p.self_us
    FROM placed AS p
    ASOF LEFT JOIN named_stretches AS n
        ON n.side = p.side AND n.on_rank = p.on_rank AND p.mid_us >= n.start_us
    WHERE p.kind <> 'cpu' OR n.label IS NULL OR p.mid_us >= n.end_us
),
-- idle inside a node outside annotations: its counted window less annotated time and loose events
node_idle AS (
    SELECT p.side, p.on_rank, p.node_id, n.phase,
           sum(p.counted_end_us - p.counted_start_us)
           - coalesce(any_value(a.us), 0) - coalesce(any_value(l.us), 0) AS us
    FROM path AS p
    JOIN nodes AS n
        ON n.run_id = p.run_id AND n.rank = p.on_rank AND n.step = p.step AND n.method = 'ctda'
       AND n.node_id = p.node_id
    LEFT JOIN (SELECT side, on_rank, node_id, sum(us) AS us FROM annotated WHERE part = 'span' AND kind = 'annotation'
               GROUP BY ALL) AS a
        ON a.side = p.side AND a.on_rank = p.on_rank AND a.node_id = p.node_id
    LEFT JOIN (SELECT side, on_rank, node_id, sum(self_us) AS us FROM loose_events GROUP BY ALL) AS l
        ON l.side = p.side AND l.on_rank = p.on_rank AND l.node_id = p.node_id
    GROUP BY p.side, p.on_rank, p.node_id, n.phase
),
pieces AS (
    SELECT side, on_rank, kind, label, us FROM annotated
    UNION ALL
    SELECT side, on_rank, CASE WHEN kind = 'cpu' THEN 'op' ELSE 'kernel' END, name, self_us FROM loose_events
    UNION ALL
    SELECT side, on_rank, 'phase', phase, us FROM node_idle
),
by_label AS (
    SELECT p.kind,
           CASE WHEN c.by_rank THEN 'rank ' || p.on_rank || ': ' ELSE '' END || coalesce(p.label, '?') AS label,
           round(coalesce(sum(p.us) FILTER (WHERE p.side = 'a'), 0)) AS a_us,
           round(coalesce(sum(p.us) FILTER (WHERE p.side = 'b'), 0)) AS b_us
    FROM pieces AS p
    JOIN chosen AS c USING (side)
    GROUP BY ALL
),
diff_rows AS (
    SELECT kind, label, a_us, b_us, b_us - a_us AS delta_us FROM by_label WHERE a_us <> 0 OR b_us <> 0
),
median_steps AS (
    SELECT round(any_value(median_us) FILTER (WHERE side = 'a')) AS a_us,
           round(any_value(median_us) FILTER (WHERE side = 'b')) AS b_us
    FROM chosen
),
-- what the rows leave of each side's step: gaps and slack outside annotations, the stretch of
-- the step the path does not cover, the median step's distance from the median
remainder AS (
    SELECT 'unexplained' AS kind, 'not on the path (gaps, slack)' AS label,
           s.a_us - coalesce(sum(r.a_us), 0) AS a_us, s.b_us - coalesce(sum(r.b_us), 0) AS b_us
    FROM median_steps AS s LEFT JOIN diff_rows AS r ON true
    GROUP BY s.a_us, s.b_us
)
SELECT kind, label, a_us, b_us, delta_us
FROM (SELECT *, 0 AS section FROM diff_rows
      UNION ALL SELECT kind, label, a_us, b_us, b_us - a_us, 1 FROM remainder
      UNION ALL SELECT 'step', 'median step', a_us, b_us, b_us - a_us, 2 FROM median_steps, rank_check WHERE ok)
ORDER BY section, abs(delta_us) DESC, kind, label;
