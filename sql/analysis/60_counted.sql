-- Stage 6: counted time. Inside each counted window, time counts only where an event of the
-- node executes (idle gaps inside a node are not work). For hotspots, each counted instant
-- goes to the innermost event executing then (self time), found with a sweep over the
-- start/end points of each path node's events: the owner of a segment is the last event
-- that started at the current nesting depth. GPU nodes go through the same sweep: device ops
-- of one stream can overlap in a trace (clock skew, concurrent copy engines), and counting
-- the union of their intervals, never the sum, keeps a node's counted time inside its window.

-- The sweep runs once per counted window, not once per method: its result depends only on the
-- node's events and its window, and the methods' paths share most nodes with the same window
-- (ctda and per_thread part ways only where the threads hand over). It is the engine's
-- costliest stage; cp_event_time hands each window's times back to every method holding it.
CREATE OR REPLACE TEMP TABLE cp_counted_windows AS
SELECT row_number() OVER () AS counted_window_id, *
FROM (SELECT DISTINCT run_id, rank, step, node_id, counted_start_us, counted_end_us FROM cp_counted);

-- The events each node holds; counted_only: only the nodes of a counted window. A macro,
-- not a table: the nodes of counted windows hold a fifth of all node events at paper scale,
-- and every node's event count (stage 7) reads only the keys; making the whole table with
-- names cost 1.6 s of a 16 x 480k analyze.
CREATE OR REPLACE TEMP MACRO cp_node_events(counted_only) AS TABLE
WITH expanded AS (
    SELECT * FROM cp_nodes
    WHERE NOT counted_only
       OR (run_id, rank, step, node_id) IN (SELECT run_id, rank, step, node_id FROM cp_counted_windows)
)
-- CPU nodes: their top-level events and everything nested in them that starts before the
-- node ends (a node holding a sync ends where the sync returned)
SELECT n.run_id, n.rank, n.step, n.node_id, o.event_id, o.name, o.cat, o.ts_us, o.end_us
FROM expanded AS n
JOIN cp_top_nodes AS t USING (run_id, rank, step, cpu_node)
JOIN cp_ops AS o ON o.run_id = t.run_id AND o.rank = t.rank AND o.top_event_id = t.event_id
WHERE n.kind = 'cpu' AND o.ts_us <= n.end_us
UNION ALL
-- wait-return nodes: the events of their top-level event that run after the wait
SELECT n.run_id, n.rank, n.step, n.node_id, o.event_id, o.name, o.cat, o.ts_us, o.end_us
FROM expanded AS n
JOIN cp_wait_returns AS r USING (run_id, rank, step, cpu_node)
JOIN cp_ops AS o ON o.run_id = r.run_id AND o.rank = r.rank AND o.top_event_id = r.top_event_id
WHERE n.kind = 'cpu' AND o.end_us >= n.start_us AND o.ts_us <= n.end_us
UNION ALL
-- CPU nodes: python frames that lie inside the node's span on its thread
SELECT n.run_id, n.rank, n.step, n.node_id, o.event_id, o.name, o.cat, o.ts_us, o.end_us
FROM expanded AS n
JOIN cp_ops AS o
    ON o.run_id = n.run_id AND o.rank = n.rank AND o.tid = n.tid AND o.pid = n.pid AND o.is_python
   AND o.ts_us >= n.start_us AND o.end_us <= n.end_us
WHERE n.kind = 'cpu'
UNION ALL
-- GPU nodes: their device ops
SELECT g.run_id, g.rank, g.step, g.node_id, g.event_id, g.name, g.cat, g.ts_us, g.end_us
FROM cp_gpu_node_events AS g
SEMI JOIN expanded AS n USING (run_id, rank, step, node_id);

CREATE OR REPLACE TEMP TABLE cp_path_members AS
SELECT c.counted_window_id, c.counted_start_us, c.counted_end_us,
       m.event_id, m.name, m.cat, m.ts_us, m.end_us
FROM cp_counted_windows AS c
JOIN cp_node_events(true) AS m USING (run_id, rank, step, node_id);

CREATE OR REPLACE TEMP TABLE cp_points AS
WITH members AS (
    -- zero-length events execute nothing and would only confuse the nesting
    SELECT * FROM cp_path_members WHERE end_us > ts_us
),
marks AS (
    -- at one instant: ends before starts; an outer start before an inner one, an inner end first
    SELECT counted_window_id, ts_us AS t, 1 AS delta, -end_us AS nesting_order, event_id
    FROM members
    UNION ALL
    SELECT counted_window_id, end_us, -1, -ts_us, event_id
    FROM members
    UNION ALL
    SELECT counted_window_id, counted_start_us, 0, 0, NULL
    FROM cp_counted_windows
    UNION ALL
    SELECT counted_window_id, counted_end_us, 0, 0, NULL
    FROM cp_counted_windows
)
SELECT *,
    row_number() OVER w AS ord,
    sum(delta) OVER (w ROWS UNBOUNDED PRECEDING) AS depth,
    lead(t) OVER w AS next_t
FROM marks
WINDOW w AS (PARTITION BY counted_window_id ORDER BY t, delta, nesting_order, event_id);

-- The owner of the segment after a point at depth d is the last event opened at depth d so
-- far: a running last_value over the points of each depth, in sweep order (half the time of
-- the ASOF join that found it before, same rows). That holds while events nest. A timestamp
-- rounded apart from its duration lets an event run past the end of one that began before
-- it, and the two close out of order: the depth's last opener may then have ended already
-- (or, in a later segment, no longer be the innermost event running). A window where the
-- sweep meets an owner that has ended is not nested, and each of its segments goes to the
-- member that began last (by the sweep's order) among those running through it: on nested
-- events the same owner as the sweep's.
CREATE OR REPLACE TEMP TABLE cp_segments AS
WITH owned AS (
    SELECT *,
        last_value(CASE WHEN delta = 1 THEN event_id END IGNORE NULLS) OVER d AS owner_event_id,
        last_value(CASE WHEN delta = 1 THEN -nesting_order END IGNORE NULLS) OVER d AS owner_end_us
    FROM cp_points
    WINDOW d AS (PARTITION BY counted_window_id, depth ORDER BY ord ROWS UNBOUNDED PRECEDING)
),
not_nested AS (
    SELECT DISTINCT counted_window_id FROM owned WHERE depth > 0 AND owner_end_us <= t
),
segments AS (
    SELECT p.counted_window_id, p.t, p.next_t, p.owner_event_id
    FROM owned AS p
    JOIN cp_counted_windows AS b USING (counted_window_id)
    WHERE p.depth > 0 AND p.next_t > p.t AND p.owner_event_id IS NOT NULL
      AND p.t >= b.counted_start_us AND p.next_t <= b.counted_end_us
),
running AS (
    SELECT s.counted_window_id, s.t, arg_max(m.event_id, (m.ts_us, -m.end_us, m.event_id)) AS event_id
    FROM segments AS s
    JOIN cp_path_members AS m
        ON m.counted_window_id = s.counted_window_id AND m.end_us > m.ts_us
       AND m.ts_us <= s.t AND m.end_us >= s.next_t
    WHERE s.counted_window_id IN (SELECT counted_window_id FROM not_nested)
    GROUP BY ALL
)
SELECT s.counted_window_id, coalesce(r.event_id, s.owner_event_id) AS event_id, s.next_t - s.t AS length_us
FROM segments AS s
LEFT JOIN running AS r ON r.counted_window_id = s.counted_window_id AND r.t = s.t;

-- Each counted window's events with their time in it, once per window: a window on several
-- methods' paths hands the same rows to each (cp_event_time).
CREATE OR REPLACE TEMP TABLE cp_window_event_time AS
WITH swept_self AS (
    SELECT counted_window_id, event_id, sum(length_us) AS self_us
    FROM cp_segments GROUP BY ALL
)
SELECT m.counted_window_id, m.event_id, m.name, m.cat,
       coalesce(s.self_us, 0) AS self_us,
       greatest(0, least(m.end_us, m.counted_end_us) - greatest(m.ts_us, m.counted_start_us)) AS inclusive_us
FROM cp_path_members AS m
LEFT JOIN swept_self AS s USING (counted_window_id, event_id);

-- Every method's path events: a view, read twice in stage 7 (the path's counted time reads
-- only keys and times; path_events stores the rows).
CREATE OR REPLACE TEMP VIEW cp_event_time AS
SELECT c.method, c.run_id, c.rank, c.step, c.node_id, t.event_id, t.name, t.cat, t.self_us, t.inclusive_us
FROM cp_counted AS c
JOIN cp_counted_windows AS w USING (run_id, rank, step, node_id, counted_start_us, counted_end_us)
JOIN cp_window_event_time AS t USING (counted_window_id);
