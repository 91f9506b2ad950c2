-- Type the raw event objects of one trace file (staged in raw_events / raw_ts)
-- into rows of `events`. Parameters: run_id, rank, origin_ts, ts_offset_us, ts_scale.
INSERT INTO events
WITH typed AS (
    SELECT
        r.event_id,
        r.json,
        CAST(trim(t.ts_text, '"') AS DECIMAL(38, 6)) AS ts_raw,
        TRY_CAST(r.json ->> 'dur' AS DOUBLE) AS dur_raw,
        r.json -> 'args' AS args
    FROM raw_events AS r
    JOIN raw_ts AS t USING (event_id)
),
located AS (
    SELECT
        *,
        CAST(ts_raw * $ts_scale + $ts_offset_us - $origin_ts AS DOUBLE) AS ts_us,
        dur_raw * $ts_scale AS dur_us,
        json ->> 'cat' AS cat,
        json ->> 'tid' AS tid,
        args ->> 'stream' AS stream_text
    FROM typed
)
SELECT
    $run_id AS run_id,
    $rank AS rank,
    event_id,
    json ->> 'name' AS name,
    cat,
    json ->> 'ph' AS ph,
    ts_us,
    dur_us,
    ts_us + coalesce(dur_us, 0) AS end_us,
    json ->> 'pid' AS pid,
    tid,
    normalize_stream(
        CASE
            WHEN stream_text IS NOT NULL THEN stream_text
            WHEN is_device_category(cat) THEN tid
        END
    ) AS stream,
    TRY_CAST(coalesce(args ->> 'correlation', args ->> 'cid') AS BIGINT) AS correlation,
    TRY_CAST(args ->> 'External id' AS BIGINT) AS external_id,
    ts_raw,
    args,
    nullif(
        json_merge_patch(
            json,
            '{"name":null,"cat":null,"ph":null,"ts":null,"dur":null,"pid":null,"tid":null,"args":null}'
        ),
        '{}'
    ) AS extra
FROM located
ORDER BY event_id;
