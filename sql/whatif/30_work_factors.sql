-- reads: wi_collectives, wi_comm_fit, events, wi_rules, wi_windows, wi_queue_waits, nodes,
--        wi_nodes, wi_edge_times, wi_latency_steps, wi_bus_factor
-- makes: _wi_comm_factors(run_id, rank, event_id, lane, ts_us, end_us, factor)
-- makes: wi_event_factors(run_id, rank, lane, event_id, ts_us, end_us, factor)
-- makes: wi_work_shrink(run_id, rank, lane, from_us, to_us, removed_rate, removed_before_us)
-- makes: _wi_changed_lanes(run_id, rank, lane)
-- makes: _wi_idle_gaps(run_id, rank, window_start_us, pid, tid, ts_us, idle_from_us)
-- makes: wi_inferred_waits(run_id, rank, lane, window_start_us, from_us, to_us, producer_lane,
--                          producer_event_id, producer_end_us, reference_us, inferred)
-- makes: wi_shrink(run_id, rank, lane, from_us, to_us, removed_rate, removed_before_us)
-- param: latency_us DOUBLE
-- param: world_size INTEGER
-- param: algorithm VARCHAR
-- param: bandwidth_scale DOUBLE
-- param: network_changed BOOLEAN
-- param: min_wait_us DOUBLE
-- param: handoff_us DOUBLE
-- How much each event's execution time changes under the scenario: a factor per event from
-- the --scale rules (wi_rules, the last matching rule wins) times the network model's factor
-- for collectives. Then, per lane (CPU thread or GPU stream), the stretches of time that
-- shrink: the outermost changed events, with the running total removed before each.

CREATE OR REPLACE TEMP TABLE _wi_comm_factors AS
WITH modelled AS (
    SELECT c.run_id, c.rank, c.event_id, c.dur_us, c.stream, c.ts_us, c.end_us,
           f.alpha_us + c.bytes * wi_bus_factor(c.collective, c.group_size, 'ring') / f.bytes_per_us AS before_us,
           coalesce($latency_us, f.alpha_us / wi_latency_steps(c.collective, c.group_size, 'ring'))
               * wi_latency_steps(c.collective, coalesce($world_size, c.group_size), coalesce($algorithm, 'ring'))
           + c.bytes * wi_bus_factor(c.collective, coalesce($world_size, c.group_size), coalesce($algorithm, 'ring'))
               / (f.bytes_per_us * $bandwidth_scale) AS after_us
    FROM wi_collectives AS c
    JOIN wi_comm_fit AS f USING (run_id, collective)
    -- a recorded one-rank collective moved nothing: no model of it to change
    WHERE $network_changed AND c.group_size > 1
)
-- the unexplained part of the measured time (waiting for other ranks) stays as it is
SELECT run_id, rank, event_id, 'gpu/' || stream AS lane, ts_us, end_us,
       (dur_us - least(dur_us, before_us) + least(dur_us, before_us) * after_us / before_us) / dur_us AS factor
FROM modelled WHERE before_us > 0;

CREATE OR REPLACE TEMP TABLE wi_event_factors AS
-- rules are matched against the distinct (name, category) pairs, then joined to the events;
-- a category glob matches the file's category or its modern name (cpu_op: 1.8-1.9's operators)
WITH kinds AS (
    SELECT DISTINCT name, cat FROM events WHERE EXISTS (SELECT 1 FROM wi_rules)
),
matched AS (
    SELECT k.name, k.cat, r.seq, r.factor, r.ranks
    FROM kinds AS k
    JOIN wi_rules AS r
        ON k.name GLOB r.name_glob
       AND (r.cat_glob IS NULL OR k.cat GLOB r.cat_glob OR kineto_category(k.cat, k.name) GLOB r.cat_glob)
),
by_rule AS (
    SELECT e.run_id, e.rank, e.event_id,
           CASE WHEN is_gpu_work(e.cat) THEN 'gpu/' || e.stream ELSE 'cpu/' || e.pid || '/' || e.tid END AS lane,
           e.ts_us, e.end_us, arg_max(m.factor, m.seq) AS factor
    FROM events AS e
    JOIN matched AS m ON m.name = e.name AND m.cat IS NOT DISTINCT FROM e.cat
    WHERE e.ph = 'X' AND e.dur_us > 0 AND (is_gpu_work(e.cat) OR NOT is_device_category(e.cat))
      AND NOT starts_with(e.name, 'ProfilerStep#')
      AND (e.run_id, e.rank) IN (SELECT DISTINCT run_id, rank FROM wi_windows)
      AND (m.ranks IS NULL OR list_contains(m.ranks, e.rank))
    GROUP BY ALL
)
-- a collective's network factor multiplies its --scale factor
SELECT run_id, rank, coalesce(r.lane, c.lane) AS lane, event_id, coalesce(r.ts_us, c.ts_us) AS ts_us,
       coalesce(r.end_us, c.end_us) AS end_us, coalesce(r.factor, 1.0) * coalesce(c.factor, 1.0) AS factor
FROM by_rule AS r
FULL JOIN _wi_comm_factors AS c USING (run_id, rank, event_id);

-- Outermost changed stretches per lane (an event inside a changed one follows its factor);
-- `removed_before_us` is the time removed on the lane before the stretch starts (recomputed
-- in wi_shrink once inferred waits are added).
CREATE OR REPLACE TEMP TABLE wi_work_shrink AS
WITH changed AS (
    SELECT run_id, rank, lane, event_id, ts_us, end_us, factor FROM wi_event_factors
    UNION ALL
    SELECT run_id, rank, lane, event_id, ts_us, end_us, 0.0 FROM wi_queue_waits  -- waiting, not work
),
ordered AS (
    SELECT *, max(end_us) OVER (PARTITION BY run_id, rank, lane ORDER BY ts_us, end_us DESC, event_id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered_until
    FROM changed
),
stretches AS (
    SELECT run_id, rank, lane, greatest(ts_us, coalesce(covered_until, ts_us)) AS from_us, end_us AS to_us,
           1.0 - factor AS removed_rate
    FROM ordered WHERE end_us > coalesce(covered_until, '-infinity'::DOUBLE)
)
SELECT *, coalesce(sum((to_us - from_us) * removed_rate) OVER (
              PARTITION BY run_id, rank, lane ORDER BY from_us
              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0.0) AS removed_before_us
FROM stretches;

-- Inferred waits (a queue hand-off has no edge in the trace): a gap of at least $min_wait_us
-- between the top-level events of a CPU thread of the graph that ends within $handoff_us after
-- work on another thread of the rank ended waited for that work. The wait shortens by as much
-- as the producer's work moved earlier relative to the waiting thread (never below zero).
--
-- The CPU threads the scenario changed: only a producer whose own lane changed can shorten a
-- wait (launch-queue waits are no change: they go in every replay).
CREATE OR REPLACE TEMP TABLE _wi_changed_lanes AS
SELECT DISTINCT run_id, rank, lane FROM wi_event_factors WHERE starts_with(lane, 'cpu/');

-- Idle gaps of at least $min_wait_us on the CPU threads of the graph, on ranks with a changed
-- thread: each op or runtime call that began after the thread sat idle since idle_from_us.
-- A runtime call ends the gap as an op does: the thread runs from there (a node may begin
-- with one, as the optimizer's first `cudaStreamIsCapturing` does), and time in it is work,
-- not waiting. An annotation does not: a loader wait lies inside `enumerate(DataLoader)#...`.
CREATE OR REPLACE TEMP TABLE _wi_idle_gaps AS
WITH lanes AS (
    SELECT DISTINCT w.run_id, w.rank, w.step, w.start_us AS window_start_us, w.end_us AS window_end_us,
           n.pid, n.tid
    FROM wi_windows AS w
    JOIN nodes AS n USING (run_id, rank, step)
    WHERE n.method = 'ctda' AND n.kind = 'cpu'
      AND (w.run_id, w.rank) IN (SELECT run_id, rank FROM _wi_changed_lanes)
),
-- A window's ops on a thread are the thread's cpu_ops and runtime calls that start in it. A
-- join on the thread with that range would compare every window with every op of the thread
-- (quadratic in a thread's steps). Instead one ordered pass per thread gives each op its
-- position in start order and each window's bounds the count of ops starting before them
-- (ties: the bounds first); the positions between are the window's ops.
lane_rows AS MATERIALIZED (
    SELECT *, row_number() OVER () AS lane_row FROM lanes
),
positions AS MATERIALIZED (
    SELECT *, (sum(is_op) OVER (PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, is_op, event_id
                                ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, pid, tid, ts_us, 1 AS is_op, event_id, end_us, NULL::BIGINT AS lane_row, NULL AS is_end
        FROM events
        WHERE ph = 'X' AND (is_cpu_op_event(cat, name) OR is_runtime_category(cat))
          AND (run_id, rank, pid, tid) IN (SELECT run_id, rank, pid, tid FROM lanes)
        UNION ALL
        SELECT run_id, rank, pid, tid, window_start_us, 0, NULL, NULL, lane_row, false FROM lane_rows
        UNION ALL
        SELECT run_id, rank, pid, tid, window_end_us, 0, NULL, NULL, lane_row, true FROM lane_rows
    )
),
lane_positions AS (
    SELECT l.lane_row, l.run_id, l.rank, l.step, l.pid, l.tid, l.window_start_us, l.window_end_us,
           unnest(range(max(p.position) FILTER (WHERE NOT p.is_end) + 1,
                        max(p.position) FILTER (WHERE p.is_end) + 1)) AS position
    FROM positions AS p
    JOIN lane_rows AS l USING (lane_row)
    GROUP BY l.lane_row, l.run_id, l.rank, l.step, l.pid, l.tid, l.window_start_us, l.window_end_us
),
lane_ops AS (
    -- a thread's first op in the window waited from the window's start (a step that begins
    -- by taking its batch from a loader thread)
    SELECT l.run_id, l.rank, l.window_start_us, l.pid, l.tid, e.ts_us,
           coalesce(max(e.end_us) OVER (PARTITION BY l.run_id, l.rank, l.step, l.pid, l.tid
                                        ORDER BY e.ts_us, e.event_id
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                    l.window_start_us) AS idle_from_us
    FROM lane_positions AS l
    JOIN positions AS e USING (run_id, rank, pid, tid, position)
    WHERE e.is_op = 1 AND e.ts_us >= l.window_start_us AND e.ts_us < l.window_end_us
)
SELECT * FROM lane_ops WHERE ts_us - idle_from_us >= $min_wait_us;

-- The inferred waits: the idle gaps that ended within $handoff_us of a changed thread's work.
CREATE OR REPLACE TEMP TABLE wi_inferred_waits AS
-- The producer is the event of another changed thread of the rank that ended last by the
-- wait's end. A join of the gaps with the rank's events would compare every gap with every
-- event of the changed threads. Instead each gap looks up every other changed thread of
-- its rank in one ordered pass over the thread's event ends (ties: the gap after the events,
-- and of events ending together the highest id): the last to end by the gap's end, checked
-- against the gap; the latest of them wins. (An ASOF join here runs as a nested loop: the
-- planner's estimate of the gaps is under its loop threshold.)
WITH producers AS MATERIALIZED (
    SELECT run_id, rank, pid, tid, end_us, max(event_id) AS event_id
    FROM events
    WHERE ph = 'X' AND NOT is_device_category(cat) AND NOT starts_with(name, 'ProfilerStep#')
      AND (run_id, rank, 'cpu/' || pid || '/' || tid) IN (SELECT run_id, rank, lane FROM _wi_changed_lanes)
    GROUP BY run_id, rank, pid, tid, end_us
),
lookups AS (
    SELECT g.run_id, g.rank, g.pid, g.tid, g.window_start_us, g.idle_from_us, g.ts_us,
           t.pid AS producer_pid, t.tid AS producer_tid
    FROM _wi_idle_gaps AS g
    JOIN (SELECT DISTINCT run_id, rank, pid, tid FROM producers) AS t
        ON t.run_id = g.run_id AND t.rank = g.rank AND (t.pid, t.tid) <> (g.pid, g.tid)
),
ends AS (
    SELECT *, last_value(producer IGNORE NULLS) OVER (
                  PARTITION BY run_id, rank, producer_pid, producer_tid ORDER BY at_us, is_lookup
                  ROWS UNBOUNDED PRECEDING) AS latest
    FROM (
        SELECT run_id, rank, pid AS producer_pid, tid AS producer_tid, end_us AS at_us, 0 AS is_lookup,
               {'end_us': end_us, 'event_id': event_id} AS producer, NULL AS pid, NULL AS tid,
               NULL::DOUBLE AS window_start_us, NULL::DOUBLE AS idle_from_us, NULL::DOUBLE AS ts_us
        FROM producers
        UNION ALL
        SELECT run_id, rank, producer_pid, producer_tid, ts_us, 1, NULL, pid, tid, window_start_us, idle_from_us, ts_us
        FROM lookups
    )
),
latest AS (
    SELECT run_id, rank, pid, tid, window_start_us, idle_from_us, ts_us, producer_pid, producer_tid,
           latest.end_us AS producer_end_us, latest.event_id AS producer_event_id
    FROM ends
    WHERE is_lookup = 1 AND latest.end_us > idle_from_us AND latest.end_us >= ts_us - $handoff_us
),
waits AS (
    SELECT run_id, rank, 'cpu/' || pid || '/' || tid AS lane, window_start_us,
           idle_from_us AS from_us, ts_us AS to_us,
           arg_max('cpu/' || producer_pid || '/' || producer_tid, (producer_end_us, producer_event_id))
               AS producer_lane,
           arg_max(producer_event_id, (producer_end_us, producer_event_id)) AS producer_event_id,
           max(producer_end_us) AS producer_end_us
    FROM latest
    GROUP BY run_id, rank, lane, window_start_us, from_us, to_us
),
with_previous AS (
    SELECT *, lag(to_us) OVER handoffs AS previous_handoff_us,
           lag(window_start_us) OVER handoffs AS previous_window_start_us
    FROM waits
    WINDOW handoffs AS (PARTITION BY run_id, rank, lane ORDER BY from_us)
),
previous_windows AS (
    SELECT run_id, rank, start_us AS window_start_us,
           lag(start_us) OVER (PARTITION BY run_id, rank ORDER BY start_us) AS previous_start_us,
           lag(end_us) OVER (PARTITION BY run_id, rank ORDER BY start_us) AS previous_end_us
    FROM wi_windows
)
-- the threads last met at the waiting thread's previous hand-off: the producer's work moves
-- the wait from there (a loader stall that began in the previous step counts whole), if that
-- hand-off was in this window or the one just before it; else from the window's start
SELECT w.run_id, w.rank, w.lane, w.window_start_us, w.from_us, w.to_us, w.producer_lane,
       w.producer_event_id, w.producer_end_us,
       CASE WHEN w.previous_window_start_us = w.window_start_us
                 OR (w.previous_window_start_us = pw.previous_start_us AND pw.previous_end_us = w.window_start_us)
            THEN w.previous_handoff_us ELSE w.window_start_us END AS reference_us,
       true AS inferred
FROM with_previous AS w
JOIN previous_windows AS pw USING (run_id, rank, window_start_us)
-- A hand-off the graph holds as an edge (the engine's cross_thread edge from the producer's
-- thread into the node that ends the gap: autograd back to the main thread) is no inferred
-- wait: the replay moves that node with the producer's node already, and shrinking the gap
-- as well would take the wait off twice, and with it the edge's measured slack (the GIL's
-- hand-off) and the node's work up to the gap's end. It stays a reference for the next wait
-- (with_previous): the threads met there.
WHERE NOT EXISTS (SELECT 1 FROM wi_edge_times AS e
                  WHERE e.run_id = w.run_id AND e.rank = w.rank AND e.dst_lane = w.lane
                    AND e.dst_start_us = w.to_us AND e.src_lane = w.producer_lane);

CREATE OR REPLACE TEMP TABLE wi_shrink AS
-- The wait shortens by the time removed on the producer's lane since the reference (the
-- threads' last hand-off), less the waiting thread's own since then. A reference in the
-- previous window also moves this window's start: by as much as the rest of that window
-- shrank after the hand-off, taken as the most any CPU thread of the graph lost there.
WITH graph_lanes AS (
    SELECT DISTINCT run_id, rank, lane FROM wi_nodes WHERE kind = 'cpu'
),
lookups AS (
    SELECT *, greatest(reference_us, window_start_us) AS own_from_us FROM wi_inferred_waits
),
-- C(t) lookups per wait, by part: 'own' sums the producer's lane from the reference to its
-- hand-off, less the waiting thread's from own_from_us to the wait; each 'tail/LANE' is a
-- graph thread's loss from a previous-window reference to the window's start (negated)
points AS (
    SELECT *, 'own' AS part, producer_lane AS at_lane, producer_end_us AS t, 1 AS sign FROM lookups
    UNION ALL SELECT *, 'own', producer_lane, reference_us, -1 FROM lookups
    UNION ALL SELECT *, 'own', lane, from_us, -1 FROM lookups
    UNION ALL SELECT *, 'own', lane, own_from_us, 1 FROM lookups
    UNION ALL SELECT l.*, 'tail/' || g.lane, g.lane, l.own_from_us, -1
    FROM lookups AS l JOIN graph_lanes AS g USING (run_id, rank)
    UNION ALL SELECT l.*, 'tail/' || g.lane, g.lane, l.reference_us, 1
    FROM lookups AS l JOIN graph_lanes AS g USING (run_id, rank)
),
removed AS (
    SELECT p.run_id, p.rank, p.lane, p.from_us, p.to_us, p.part, p.sign,
           coalesce(s.removed_before_us + s.removed_rate * least(greatest(p.t - s.from_us, 0), s.to_us - s.from_us),
                    0.0) AS removed_us
    FROM points AS p
    ASOF LEFT JOIN wi_work_shrink AS s
        ON s.run_id = p.run_id AND s.rank = p.rank AND s.lane = p.at_lane AND s.from_us <= p.t
),
parts AS (
    SELECT run_id, rank, lane, from_us, to_us, part, sum(sign * removed_us) AS removed_us
    FROM removed GROUP BY ALL
),
waits AS (
    SELECT run_id, rank, lane, from_us, to_us,
           least(to_us - from_us, greatest(0.0, sum(removed_us) FILTER (part = 'own')
                                                + coalesce(min(removed_us) FILTER (part <> 'own'), 0.0))) AS removed_us
    FROM parts
    GROUP BY run_id, rank, lane, from_us, to_us
),
-- A wait overlaps a changed stretch of its lane when the stretches starting before its end
-- reach past its start: the latest end so far in one ordered pass over the lane's stretch
-- starts and wait ends (ties: the wait first), where a NOT EXISTS would compare every wait
-- with every stretch of its lane.
wait_rows AS (
    SELECT *, row_number() OVER () AS wait_row FROM waits WHERE removed_us > 0
),
covered AS (
    SELECT *, max(stretch_to_us) OVER (PARTITION BY run_id, rank, lane ORDER BY at_us, is_stretch
                                       ROWS UNBOUNDED PRECEDING) AS covered_to_us
    FROM (
        SELECT run_id, rank, lane, from_us AS at_us, 1 AS is_stretch, to_us AS stretch_to_us, NULL::BIGINT AS wait_row
        FROM wi_work_shrink
        UNION ALL
        SELECT run_id, rank, lane, to_us, 0, NULL, wait_row FROM wait_rows
    )
),
stretches AS (
    SELECT run_id, rank, lane, from_us, to_us, removed_rate FROM wi_work_shrink
    UNION ALL
    -- a wait inside a changed stretch already follows that stretch's factor
    SELECT w.run_id, w.rank, w.lane, w.from_us, w.to_us, w.removed_us / (w.to_us - w.from_us)
    FROM wait_rows AS w
    JOIN covered AS c USING (wait_row)
    WHERE NOT coalesce(w.to_us IS NOT NULL AND c.covered_to_us > w.from_us, false)
)
SELECT *, coalesce(sum((to_us - from_us) * removed_rate) OVER (
              PARTITION BY run_id, rank, lane ORDER BY from_us
              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0.0) AS removed_before_us
FROM stretches;
