-- The wi_inferred_waits statement of sql/whatif/30_work_factors.sql as it was at aa51275, before issue 32
-- replaced its `lane_ops` join (every window of a thread with every cpu_op of the thread) and
-- its `waits` join (every gap with every event of the rank's changed threads) by ordered passes.
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name and the two changes issue 42 (item 5)
-- made to what a wait is, marked `issue 42`: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_wi_inferred_waits AS
-- only a producer whose own lane the scenario changed can shorten a wait (launch-queue waits
-- are no change: they go in every replay)
WITH changed_lanes AS (
    SELECT DISTINCT run_id, rank, lane FROM wi_event_factors WHERE starts_with(lane, 'cpu/')
),
lanes AS (
    SELECT DISTINCT w.run_id, w.rank, w.step, w.start_us AS window_start_us, w.end_us AS window_end_us,
           n.pid, n.tid
    FROM wi_windows AS w
    JOIN nodes AS n USING (run_id, rank, step)
    WHERE n.method = 'ctda' AND n.kind = 'cpu'
      AND (w.run_id, w.rank) IN (SELECT run_id, rank FROM changed_lanes)
),
lane_ops AS (
    -- a thread's first op in the window waited from the window's start (a step that begins
    -- by taking its batch from a loader thread)
    SELECT l.run_id, l.rank, l.window_start_us, l.pid, l.tid, e.ts_us,
           coalesce(max(e.end_us) OVER (PARTITION BY l.run_id, l.rank, l.step, l.pid, l.tid
                                        ORDER BY e.ts_us, e.event_id
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                    l.window_start_us) AS idle_from_us
    FROM lanes AS l
    JOIN events AS e
        ON e.run_id = l.run_id AND e.rank = l.rank AND e.pid = l.pid AND e.tid = l.tid AND e.ph = 'X'
       AND (e.cat = 'cpu_op' OR is_runtime_category(e.cat))  -- issue 42: a runtime call ends a gap
       AND e.ts_us >= l.window_start_us AND e.ts_us < l.window_end_us
),
gaps AS (
    SELECT * FROM lane_ops WHERE ts_us - idle_from_us >= $min_wait_us
),
waits AS (
    SELECT g.run_id, g.rank, 'cpu/' || g.pid || '/' || g.tid AS lane, g.window_start_us,
           g.idle_from_us AS from_us, g.ts_us AS to_us,
           arg_max('cpu/' || p.pid || '/' || p.tid, p.end_us) AS producer_lane,
           arg_max(p.event_id, p.end_us) AS producer_event_id, max(p.end_us) AS producer_end_us
    FROM gaps AS g
    JOIN events AS p
        ON p.run_id = g.run_id AND p.rank = g.rank AND p.ph = 'X' AND NOT is_device_category(p.cat)
       AND (p.run_id, p.rank, 'cpu/' || p.pid || '/' || p.tid) IN (SELECT run_id, rank, lane FROM changed_lanes)
       AND (p.pid, p.tid) <> (g.pid, g.tid) AND NOT starts_with(p.name, 'ProfilerStep#')
       AND p.end_us > g.idle_from_us AND p.end_us <= g.ts_us AND p.end_us >= g.ts_us - $handoff_us
    GROUP BY ALL
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
-- issue 42: a hand-off the graph holds as an edge is no inferred wait
WHERE NOT EXISTS (SELECT 1 FROM wi_edge_times AS e
                  WHERE e.run_id = w.run_id AND e.rank = w.rank AND e.dst_lane = w.lane
                    AND e.dst_start_us = w.to_us AND e.src_lane = w.producer_lane);
