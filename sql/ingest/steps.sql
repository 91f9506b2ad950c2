-- reads: events
-- writes: steps
-- param: run_id INTEGER
-- param: rank INTEGER
-- One step per ProfilerStep#N annotation of one trace; a trace without any gets one
-- step (number 0) spanning all of its timed events.
-- Steps partition the rank's timeline (docs/method.md, "Windows partition the timeline"):
-- step N runs from its start to the start of step N+1, so no microsecond belongs to two
-- steps; the last step runs to the later of its annotation's end and the end of the device
-- work launched inside it. The annotation's own end stays in `events` (steps.event_id).
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
           arg_min(end_us, ts_us) AS annotation_end_us, arg_min(event_id, ts_us) AS event_id
    FROM marks
    WHERE step IS NOT NULL
    GROUP BY step
),
partitioned AS (
    SELECT *, lead(start_us) OVER (ORDER BY start_us, step) AS next_start_us
    FROM annotated
),
last_step_device_end AS (
    -- device work whose launch call starts inside the last step
    SELECT max(gpu.end_us) AS device_end_us
    FROM (SELECT * FROM partitioned WHERE next_start_us IS NULL) AS last_step
    JOIN events AS call
        ON call.run_id = $run_id AND call.rank = $rank AND call.correlation IS NOT NULL
       AND call.stream IS NULL AND call.ph = 'X'
       AND call.ts_us >= last_step.start_us AND call.ts_us < last_step.annotation_end_us
    JOIN events AS gpu
        ON gpu.run_id = $run_id AND gpu.rank = $rank AND gpu.correlation = call.correlation
       AND gpu.ph = 'X' AND is_gpu_work(gpu.cat)
),
windows AS (
    SELECT p.step, p.name, p.start_us, p.event_id,
           coalesce(p.next_start_us,
                    greatest(p.annotation_end_us, coalesce(d.device_end_us, p.annotation_end_us))) AS end_us
    FROM partitioned AS p
    CROSS JOIN last_step_device_end AS d
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
FROM windows
UNION ALL
SELECT $run_id, $rank, step, name, start_us, end_us, end_us - start_us, true, event_id
FROM whole;
