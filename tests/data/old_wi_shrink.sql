-- The wi_shrink statement of sql/whatif/30_work_factors.sql as it was at aa51275, before issue 32
-- replaced its NOT EXISTS (every wait with every changed stretch of its lane) by an ordered pass.
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_wi_shrink AS
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
stretches AS (
    SELECT run_id, rank, lane, from_us, to_us, removed_rate FROM wi_work_shrink
    UNION ALL
    -- a wait inside a changed stretch already follows that stretch's factor
    SELECT run_id, rank, lane, from_us, to_us, removed_us / (to_us - from_us)
    FROM waits AS w
    WHERE removed_us > 0 AND NOT EXISTS (
        SELECT 1 FROM wi_work_shrink AS s
        WHERE s.run_id = w.run_id AND s.rank = w.rank AND s.lane = w.lane AND s.from_us < w.to_us
          AND s.to_us > w.from_us)
)
SELECT *, coalesce(sum((to_us - from_us) * removed_rate) OVER (
              PARTITION BY run_id, rank, lane ORDER BY from_us
              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0.0) AS removed_before_us
FROM stretches;
