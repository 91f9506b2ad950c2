-- One step per ProfilerStep#N annotation of one trace; a trace without any gets one
-- step (number 0) spanning all of its timed events.
INSERT INTO steps
WITH marks AS (
    SELECT
        TRY_CAST(regexp_extract(name, '^ProfilerStep#(\d+)$', 1) AS BIGINT) AS step,
        name, ts_us, end_us, event_id
    FROM events
    WHERE run_id = $run_id AND rank = $rank AND ph = 'X'
      AND name LIKE 'ProfilerStep#%' AND NOT is_device_category(cat)
),
annotated AS (
    SELECT step, arg_min(name, ts_us) AS name, min(ts_us) AS start_us,
           arg_min(end_us, ts_us) AS end_us, arg_min(event_id, ts_us) AS event_id
    FROM marks
    WHERE step IS NOT NULL
    GROUP BY step
),
whole AS (
    SELECT 0 AS step, 'whole trace' AS name, min(ts_us) AS start_us, max(end_us) AS end_us,
           NULL::BIGINT AS event_id
    FROM events
    -- the profiler's own span (cat Trace) starts before any work and is not part of it
    WHERE run_id = $run_id AND rank = $rank AND ph IN ('X', 'i') AND ts_us IS NOT NULL
      AND coalesce(cat, '') <> 'Trace'
    HAVING count(*) > 0 AND NOT EXISTS (SELECT 1 FROM annotated)
)
SELECT $run_id, $rank, step, name, start_us, end_us, end_us - start_us, false, event_id
FROM annotated
UNION ALL
SELECT $run_id, $rank, step, name, start_us, end_us, end_us - start_us, true, event_id
FROM whole;
