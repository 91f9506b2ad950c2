-- Counts of recoverable oddities in one trace file (reported as a warning), over its typed
-- events (sql/ingest/typed_events.sql) in the parse worker: off the insert's one thread.
WITH trace_events AS (
    SELECT * FROM events
),
flow_starts AS (
    SELECT DISTINCT cat, extra ->> 'id' AS flow_id FROM trace_events WHERE ph = 's'
)
SELECT
    count(*) FILTER (WHERE e.ph = 'X' AND e.dur_raw IS NULL),
    count(*) FILTER (WHERE e.ph <> 'M' AND (TRY_CAST(e.pid AS BIGINT) IS NULL OR TRY_CAST(e.tid AS BIGINT) IS NULL)),
    count(*) FILTER (WHERE e.cat IS NULL AND e.ph NOT IN ('M', 'i')),
    count(*) FILTER (WHERE e.ph = 'f' AND s.flow_id IS NULL),
    count(*) FILTER (WHERE len(list_filter(json_keys(e.extra),
        lambda k: k NOT IN ('id', 'bp', 's', 'cname', 'tts', 'use'))) > 0)
FROM trace_events AS e
LEFT JOIN flow_starts AS s
    ON e.ph = 'f' AND s.flow_id = e.extra ->> 'id' AND s.cat IS NOT DISTINCT FROM e.cat;
