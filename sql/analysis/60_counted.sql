-- reads: cp_counted, cp_gpu_node_events, cp_comm_ops, cp_nodes, cp_top_nodes, cp_ops,
--        cp_wait_returns
-- makes: _cp_counted_windows(counted_window_id, run_id, rank, step, node_id, counted_start_us,
--                           counted_end_us)
-- makes: _cp_path_members(counted_window_id, counted_start_us, counted_end_us, event_id, name, cat,
--                        ts_us, end_us)
-- makes: _cp_points(counted_window_id, t, delta, nesting_order, event_id, ord, depth, next_t)
-- makes: _cp_segments(counted_window_id, event_id, length_us)
-- makes: _cp_window_event_time(counted_window_id, event_id, name, cat, self_us, inclusive_us)
-- makes: cp_event_time(method, run_id, rank, step, node_id, event_id, name, cat, self_us,
--                      inclusive_us)
-- makes macro: cp_node_events(counted_only)
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
CREATE OR REPLACE TEMP TABLE _cp_counted_windows AS
SELECT row_number() OVER () AS counted_window_id, *
FROM (SELECT DISTINCT run_id, rank, step, node_id, counted_start_us, counted_end_us FROM cp_counted);

-- The events each node holds; counted_only: only the nodes of a counted window. A macro,
-- not a table: the nodes of counted windows hold a fifth of all node events at paper scale,
-- and every node's event count (stage 7) reads only the keys, so a whole table with names
-- would be mostly unread.
CREATE OR REPLACE TEMP MACRO cp_node_events(counted_only) AS TABLE
WITH expanded AS (
    SELECT * FROM cp_nodes
    WHERE NOT counted_only
       OR (run_id, rank, step, node_id) IN (SELECT run_id, rank, step, node_id FROM _cp_counted_windows)
),
-- A CPU node holds the python frames of its thread that start at or after its start and end
-- by its end. A join on the thread with that range would compare every node with every frame
-- of the thread (quadratic in a with_stack trace's thread). Instead one ordered pass
-- over each thread's frames and node bounds gives every frame its position on the thread (in
-- start order) and every bound the count of frames before it: frames starting before the
-- node's start (ties: the bound first) and at or before its end (ties: the bound last). The
-- node's candidates are the positions between, whose end is then checked. A frame's end is
-- never before its start (ingest rejects a negative duration), so no frame that starts after
-- a node's end can end inside it. Nodes of one thread do not overlap (they are runs of its
-- top-level events), so each frame is a candidate of at most the two nodes that share an
-- instant: n log n in the thread's frames and nodes.
frame_counts AS MATERIALIZED (
    SELECT *, (sum(is_frame) OVER (PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, bound_order, event_id
                                   ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, pid, tid, ts_us, 1 AS bound_order, 1 AS is_frame, event_id, name, cat, end_us,
               NULL::BIGINT AS step, NULL::BIGINT AS node_id
        FROM cp_ops
        WHERE is_python
        UNION ALL
        SELECT run_id, rank, pid, tid, start_us, 0, 0, NULL, NULL, NULL, end_us, step, node_id
        FROM expanded WHERE kind = 'cpu' AND comm_event_id IS NULL
        UNION ALL
        SELECT run_id, rank, pid, tid, end_us, 2, 0, NULL, NULL, NULL, end_us, step, node_id
        FROM expanded WHERE kind = 'cpu' AND comm_event_id IS NULL
    )
),
node_frame_positions AS (
    SELECT run_id, rank, pid, tid, step, node_id, node_end_us,
           unnest(range(frames_before + 1, frames_by_end + 1)) AS position
    FROM (
        SELECT run_id, rank, pid, tid, step, node_id, end_us AS node_end_us,
               max(position) FILTER (WHERE bound_order = 0) AS frames_before,
               max(position) FILTER (WHERE bound_order = 2) AS frames_by_end
        FROM frame_counts
        WHERE is_frame = 0
        GROUP BY ALL
    )
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
FROM node_frame_positions AS n
JOIN frame_counts AS o USING (run_id, rank, pid, tid, position)
WHERE o.is_frame = 1 AND o.end_us <= n.node_end_us
UNION ALL
-- communication nodes: their gloo execution
SELECT n.run_id, n.rank, n.step, n.node_id, o.event_id, o.name, o.cat, o.ts_us, o.end_us
FROM expanded AS n
JOIN cp_comm_ops AS o ON o.run_id = n.run_id AND o.rank = n.rank AND o.event_id = n.comm_event_id
UNION ALL
-- GPU nodes: their device ops
SELECT g.run_id, g.rank, g.step, g.node_id, g.event_id, g.name, g.cat, g.ts_us, g.end_us
FROM cp_gpu_node_events AS g
SEMI JOIN expanded AS n USING (run_id, rank, step, node_id);

CREATE OR REPLACE TEMP TABLE _cp_path_members AS
SELECT c.counted_window_id, c.counted_start_us, c.counted_end_us,
       m.event_id, m.name, m.cat, m.ts_us, m.end_us
FROM _cp_counted_windows AS c
JOIN cp_node_events(true) AS m USING (run_id, rank, step, node_id);

CREATE OR REPLACE TEMP TABLE _cp_points AS
WITH members AS (
    -- zero-length events execute nothing and would only confuse the nesting
    SELECT * FROM _cp_path_members WHERE end_us > ts_us
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
    FROM _cp_counted_windows
    UNION ALL
    SELECT counted_window_id, counted_end_us, 0, 0, NULL
    FROM _cp_counted_windows
)
SELECT *,
    row_number() OVER w AS ord,
    sum(delta) OVER (w ROWS UNBOUNDED PRECEDING) AS depth,
    lead(t) OVER w AS next_t
FROM marks
WINDOW w AS (PARTITION BY counted_window_id ORDER BY t, delta, nesting_order, event_id);

-- The owner of the segment after a point at depth d is the last event opened at depth d so
-- far: a running last_value over the points of each depth, in sweep order (cheaper than an
-- ASOF join, same rows). That holds while events nest. A timestamp
-- rounded apart from its duration lets an event run past the end of one that began before
-- it, and the two close out of order: the depth's last opener may then have ended already
-- (or, in a later segment, no longer be the innermost event running). A window where the
-- sweep meets an owner that has ended is not nested, and each of its segments goes to the
-- member that began last (by the sweep's order) among those running through it: on nested
-- events the same owner as the sweep's.
--
-- "Began last among those running" is, in sweep positions (ord), the largest open position
-- o <= p whose close position c > p, for the segment after point p: the members open there
-- are exactly those with o <= p < c (points at one instant are adjacent, and a segment
-- follows the last of them). A range join finds it in time quadratic in the window's members;
-- a stabbing query over dyadic blocks finds it in
-- n log n. Each member's positions [o, c - 1] split into at most two blocks per level
-- (block b of level k holds positions b * 2^k .. (b + 1) * 2^k - 1): the blocks inside the
-- range whose parent block is not. Every position of the range lies in exactly one of them,
-- and each point p lies in one block per level (p >> k), so the latest open running through
-- p is the largest o over those blocks. After an open point the answer is that point's own
-- member (nothing running began later), which the sweep's owner already is.
CREATE OR REPLACE TEMP TABLE _cp_segments AS
WITH owned AS (
    SELECT *,
        last_value(CASE WHEN delta = 1 THEN event_id END IGNORE NULLS) OVER d AS owner_event_id,
        last_value(CASE WHEN delta = 1 THEN -nesting_order END IGNORE NULLS) OVER d AS owner_end_us
    FROM _cp_points
    WINDOW d AS (PARTITION BY counted_window_id, depth ORDER BY ord ROWS UNBOUNDED PRECEDING)
),
not_nested AS (
    SELECT DISTINCT counted_window_id FROM owned WHERE depth > 0 AND owner_end_us <= t
),
segments AS (
    SELECT p.counted_window_id, p.ord, p.delta, p.t, p.next_t, p.owner_event_id
    FROM owned AS p
    JOIN _cp_counted_windows AS b USING (counted_window_id)
    WHERE p.depth > 0 AND p.next_t > p.t AND p.owner_event_id IS NOT NULL
      AND p.t >= b.counted_start_us AND p.next_t <= b.counted_end_us
),
member_points AS (
    -- a member's open and close carry its start and end; a member listed twice in a window
    -- opens and closes twice at the same instants: pair its n-th open with its n-th close
    SELECT counted_window_id, ord, delta, event_id,
           CASE WHEN delta = 1 THEN t ELSE -nesting_order END AS ts_us,
           CASE WHEN delta = 1 THEN -nesting_order ELSE t END AS end_us,
           row_number() OVER (PARTITION BY counted_window_id, event_id, ts_us, end_us, delta ORDER BY ord) AS occurrence
    FROM _cp_points
    WHERE delta <> 0 AND counted_window_id IN (SELECT counted_window_id FROM not_nested)
),
window_levels AS (
    -- enough levels that the top one's single block holds every position of the window
    SELECT counted_window_id, floor(log2(max(ord)))::INTEGER + 3 AS levels
    FROM _cp_points
    WHERE counted_window_id IN (SELECT counted_window_id FROM not_nested)
    GROUP BY counted_window_id
),
member_ranges AS (
    SELECT o.counted_window_id, o.event_id, o.ord AS open_ord, c.ord - 1 AS last_ord
    FROM member_points AS o
    JOIN member_points AS c USING (counted_window_id, event_id, ts_us, end_us, occurrence)
    WHERE o.delta = 1 AND c.delta = -1
),
inside AS (
    -- the blocks of each level that lie inside a member's range: first .. last
    SELECT counted_window_id, event_id, open_ord, level,
           (open_ord + (1::BIGINT << level) - 1) >> level AS first_block,
           ((last_ord + 1) >> level) - 1 AS last_block,
           (open_ord + (1::BIGINT << (level + 1)) - 1) >> (level + 1) AS first_parent,
           ((last_ord + 1) >> (level + 1)) - 1 AS last_parent
    FROM (
        SELECT r.*, unnest(range(0, w.levels)) AS level
        FROM member_ranges AS r
        JOIN window_levels AS w USING (counted_window_id)
    )
),
blocks AS (
    -- only the two end blocks of a level can have a parent that is not inside
    SELECT counted_window_id, level, block, max(open_ord) AS open_ord, arg_max(event_id, open_ord) AS event_id
    FROM (
        SELECT counted_window_id, event_id, open_ord, level, first_parent, last_parent,
               unnest(CASE WHEN last_block > first_block THEN [first_block, last_block] ELSE [first_block] END) AS block
        FROM inside
        WHERE first_block <= last_block
    )
    WHERE NOT (block >> 1 BETWEEN first_parent AND last_parent)
    GROUP BY ALL
),
ancestors AS MATERIALIZED (
    -- the block of each level that holds the point; materialized, so that the join below
    -- matches on all three keys (joined on the window alone, it grows with the square again)
    SELECT counted_window_id, ord, level, ord >> level AS block
    FROM (
        SELECT s.counted_window_id, s.ord, unnest(range(0, w.levels)) AS level
        FROM segments AS s
        JOIN window_levels AS w USING (counted_window_id)
        WHERE s.delta <> 1
    )
),
running AS (
    SELECT a.counted_window_id, a.ord, arg_max(b.event_id, b.open_ord) AS event_id
    FROM ancestors AS a
    JOIN blocks AS b USING (counted_window_id, level, block)
    GROUP BY ALL
)
SELECT s.counted_window_id, coalesce(r.event_id, s.owner_event_id) AS event_id, s.next_t - s.t AS length_us
FROM segments AS s
LEFT JOIN running AS r ON r.counted_window_id = s.counted_window_id AND r.ord = s.ord;

-- Each counted window's events with their time in it, once per window: a window on several
-- methods' paths hands the same rows to each (cp_event_time).
CREATE OR REPLACE TEMP TABLE _cp_window_event_time AS
WITH swept_self AS (
    SELECT counted_window_id, event_id, sum(length_us) AS self_us
    FROM _cp_segments GROUP BY ALL
)
SELECT m.counted_window_id, m.event_id, m.name, m.cat,
       coalesce(s.self_us, 0) AS self_us,
       greatest(0, least(m.end_us, m.counted_end_us) - greatest(m.ts_us, m.counted_start_us)) AS inclusive_us
FROM _cp_path_members AS m
LEFT JOIN swept_self AS s USING (counted_window_id, event_id);

-- Every method's path events: a view, read twice in stage 7 (the path's counted time reads
-- only keys and times; path_events stores the rows).
CREATE OR REPLACE TEMP VIEW cp_event_time AS
SELECT c.method, c.run_id, c.rank, c.step, c.node_id, t.event_id, t.name, t.cat, t.self_us, t.inclusive_us
FROM cp_counted AS c
JOIN _cp_counted_windows AS w USING (run_id, rank, step, node_id, counted_start_us, counted_end_us)
JOIN _cp_window_event_time AS t USING (counted_window_id);
