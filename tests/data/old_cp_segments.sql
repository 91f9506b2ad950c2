-- The _cp_segments statement of sql/analysis/60_counted.sql as it was at ab2bb27, before issue
-- 32 replaced its `running` range join (quadratic in a non-nested window's members) with a
-- sweep. tests/engine/test_result_digest.py runs it after `analyze`, on the same temp tables
-- (_cp_points, _cp_path_members, _cp_counted_windows), and compares its rows with the new
-- statement's. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_cp_segments AS
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
    SELECT p.counted_window_id, p.t, p.next_t, p.owner_event_id
    FROM owned AS p
    JOIN _cp_counted_windows AS b USING (counted_window_id)
    WHERE p.depth > 0 AND p.next_t > p.t AND p.owner_event_id IS NOT NULL
      AND p.t >= b.counted_start_us AND p.next_t <= b.counted_end_us
),
running AS (
    SELECT s.counted_window_id, s.t, arg_max(m.event_id, (m.ts_us, -m.end_us, m.event_id)) AS event_id
    FROM segments AS s
    JOIN _cp_path_members AS m
        ON m.counted_window_id = s.counted_window_id AND m.end_us > m.ts_us
       AND m.ts_us <= s.t AND m.end_us >= s.next_t
    WHERE s.counted_window_id IN (SELECT counted_window_id FROM not_nested)
    GROUP BY ALL
)
SELECT s.counted_window_id, coalesce(r.event_id, s.owner_event_id) AS event_id, s.next_t - s.t AS length_us
FROM segments AS s
LEFT JOIN running AS r ON r.counted_window_id = s.counted_window_id AND r.t = s.t;
