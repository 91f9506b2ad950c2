-- The parsed events of one trace file as `typed_events`, the input sql/ingest/events.sql
-- reads, with the file's rank and time scale and offset added (bound, never pasted).
-- `parsed_events` is the Arrow table traceio.read_trace made. Parameters: rank, ts_scale,
-- ts_offset_us.
CREATE OR REPLACE TEMP TABLE typed_events AS
SELECT
    CAST($rank AS INTEGER) AS rank,
    CAST($ts_scale AS DECIMAL(38, 6)) AS ts_scale,
    CAST($ts_offset_us AS DECIMAL(38, 6)) AS ts_offset_us,
    *
FROM parsed_events;
