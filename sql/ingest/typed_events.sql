-- makes: rows(event_id, name, cat, ph, ts_raw, dur_text, dur_raw, pid, tid, stream_text,
--             correlation, external_id, args, extra, suspect_ts, unset_ts)
-- param: first_event_id BIGINT
-- param: events_file VARCHAR
-- Type the raw event objects of one trace file (a JSON array in $events_file, or one part of
-- the file's array whose first event is at $first_event_id), parsing each object once:
-- json_transform reads every Kineto field in one pass (ts as DECIMAL straight from the number
-- text, so nanosecond digits survive). Runs in a bare in-memory DuckDB inside
-- the ingest worker (traceio.py); the result travels to the warehouse as Arrow. The CTEs are
-- not MATERIALIZED: DuckDB computes json_transform once per row either way, and copying the
-- rows (raw JSON included) into two materializations cost 10-20% of the query.
-- suspect_ts flags events the exact Python checks of traceio.py must look at.
WITH raw AS (
    SELECT row_number() OVER () - 1 + $first_event_id AS event_id, json
    FROM read_json_objects($events_file, format = 'array', maximum_object_size = 1073741824)
),
parsed AS (
    SELECT
        event_id,
        json,
        json_transform(json, '{"name": "VARCHAR", "cat": "VARCHAR", "ph": "VARCHAR",
            "ts": "DECIMAL(38, 6)", "dur": "VARCHAR", "pid": "VARCHAR", "tid": "VARCHAR",
            "args": "JSON"}') AS f
    FROM raw
),
args_fields AS (
    SELECT
        *,
        json_extract_string(f.args, ['$.stream', '$.correlation', '$.cid', '$."External id"']) AS a
    FROM parsed
)
SELECT
    event_id,
    f.name AS name,
    f.cat AS cat,
    f.ph AS ph,
    f.ts AS ts_raw,
    f.dur AS dur_text,
    TRY_CAST(f.dur AS DOUBLE) AS dur_raw,
    f.pid AS pid,
    f.tid AS tid,
    a[1] AS stream_text,
    TRY_CAST(coalesce(a[2], a[3]) AS BIGINT) AS correlation,
    TRY_CAST(a[4] AS BIGINT) AS external_id,
    f.args AS args,
    -- every other key; merging on all rows is cheaper than finding the rows that have some
    nullif(
        json_merge_patch(
            json,
            '{"name":null,"cat":null,"ph":null,"ts":null,"dur":null,"pid":null,"tid":null,"args":null}'
        ),
        '{}'
    ) AS extra,
    -- a missing ts or name (also a non-object event), or a ts that is not a number
    f.ts IS NULL OR f.name IS NULL
        -- json_transform reads true/false as 1/0: look at the JSON type of those few rows
        OR CASE WHEN f.ts IN (0, 1)
            THEN json_type(json, '$.ts') NOT IN ('BIGINT', 'UBIGINT', 'DOUBLE', 'VARCHAR') ELSE false END
        AS suspect_ts,
    -- Kineto writes an unset ts as 0: such events are left out of the earliest ts
    CASE WHEN f.ts = 0 THEN json_extract(json, '$.ts')::VARCHAR IN ('0', '"0"') ELSE false END AS unset_ts
-- no ORDER BY: rows keep scan order (preserve_insertion_order; traceio.py checks it), and
-- sorting the wide rows cost a third of this query
FROM args_fields
