-- Rows of `events` for one trace file, from its typed events (the Arrow table
-- `typed_events` made by sql/ingest/typed_events.sql in the parse worker): no JSON is parsed
-- here. Parameters: run_id, rank, origin_ts, ts_offset_us, ts_scale.
INSERT INTO events
WITH located AS (
    SELECT
        *,
        CAST(ts_raw * $ts_scale + $ts_offset_us - $origin_ts AS DOUBLE) AS ts_us,
        dur_raw * $ts_scale AS dur_us
    FROM typed_events
)
SELECT
    $run_id AS run_id,
    $rank AS rank,
    event_id,
    name,
    cat,
    ph,
    ts_us,
    dur_us,
    ts_us + coalesce(dur_us, 0) AS end_us,
    pid,
    tid,
    normalize_stream(
        CASE
            WHEN stream_text IS NOT NULL THEN stream_text
            WHEN is_device_category(cat) THEN tid
        END
    ) AS stream,
    correlation,
    external_id,
    ts_raw,
    args,
    extra
-- typed_events is already in event_id order and inserts keep it (no sort of the wide rows)
FROM located;
