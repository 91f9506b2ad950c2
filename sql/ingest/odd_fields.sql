-- registered: events
-- makes: rows(without_dur, string_lanes, without_cat, flow_ends_without_start, extra_keys)
-- Counts of recoverable oddities in one trace file (reported as a warning), over its typed
-- events (sql/ingest/typed_events.sql) in the parse worker.
WITH flow_starts AS (
    SELECT DISTINCT cat, extra ->> 'id' AS flow_id FROM events WHERE ph = 's'
),
flow_ends_without_start AS (
    SELECT count(*) AS n
    FROM events AS e
    ANTI JOIN flow_starts AS s ON s.flow_id = e.extra ->> 'id' AND s.cat IS NOT DISTINCT FROM e.cat
    WHERE e.ph = 'f'
)
SELECT
    count(*) FILTER (WHERE e.ph = 'X' AND e.dur_raw IS NULL) AS without_dur,
    count(*) FILTER (WHERE e.ph <> 'M' AND (TRY_CAST(e.pid AS BIGINT) IS NULL OR TRY_CAST(e.tid AS BIGINT) IS NULL)) AS string_lanes,
    count(*) FILTER (WHERE e.cat IS NULL AND e.ph NOT IN ('M', 'i')) AS without_cat,
    (SELECT n FROM flow_ends_without_start) AS flow_ends_without_start,
    count(*) FILTER (WHERE len(list_filter(json_keys(e.extra),
        lambda k: k NOT IN ('id', 'bp', 's', 'cname', 'tts', 'use'))) > 0) AS extra_keys
FROM events AS e;
