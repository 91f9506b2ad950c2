-- registered: typed_events
-- makes: rows(run_id, rank, event_id, name, cat, ph, ts_us, dur_us, pid, tid, stream, correlation,
--             external_id, ts_raw, args, extra)
-- param: origin_ts DECIMAL
-- param: run_id INTEGER
-- The rows of `events` from typed events: `typed_events` is an Arrow table of ingest.py (rows
-- of one or two trace files, made by sql/ingest/typed_events.sql in the parse worker, with
-- each file's rank, ts_scale and ts_offset_us as columns). No JSON is parsed here. Ingest
-- inserts them (warehouse/ingest/load.py, `_events_sql`: INSERT INTO events BY NAME, which leaves
-- the generated end_us out); a lake's write task writes them to Parquet, sorted by time.
-- Parameters: run_id, origin_ts.
WITH located AS (
    SELECT
        *,
        -- exact decimals, then one rounding to DOUBLE. A scale of 1 (microsecond files, the
        -- usual case) skips the multiply: its DECIMAL(38,12) product makes the cast to DOUBLE
        -- about 20x dearer for the same value
        CASE WHEN ts_scale = 1
            THEN CAST(ts_raw + ts_offset_us - $origin_ts AS DOUBLE)
            ELSE CAST(ts_raw * ts_scale + ts_offset_us - $origin_ts AS DOUBLE)
        END AS ts_us,
        dur_raw * ts_scale AS dur_us
    FROM typed_events
)
SELECT
    CAST($run_id AS INTEGER) AS run_id,
    rank,
    event_id,
    name,
    cat,
    ph,
    ts_us,
    dur_us,
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
-- each file's rows are already in event_id order and the insert keeps it (no sort of the wide rows)
FROM located;
