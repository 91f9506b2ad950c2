-- Warehouse tables filled by `ctda-sql ingest`. Times are microseconds (DOUBLE)
-- relative to the run's origin (runs.origin_ts), so ranks of one run compare directly.
CREATE SEQUENCE IF NOT EXISTS run_id_seq START 1;

CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY,
    name VARCHAR NOT NULL UNIQUE,
    ingested_at TIMESTAMP NOT NULL,
    meta JSON NOT NULL,
    -- epoch microseconds subtracted from every raw timestamp of the run
    origin_ts DECIMAL(38, 6) NOT NULL
);

CREATE TABLE IF NOT EXISTS traces (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    source_path VARCHAR NOT NULL,
    file_sha256 VARCHAR NOT NULL,
    file_bytes BIGINT NOT NULL,
    world_size INTEGER,
    event_count BIGINT NOT NULL,
    -- where the rank came from: distributedInfo, file name or default
    rank_source VARCHAR NOT NULL,
    -- 'us' or 'ns' (microsecond values carrying nanosecond digits)
    time_resolution VARCHAR NOT NULL,
    -- added to raw ts to get epoch microseconds (baseTimeNanoseconds / 1000)
    ts_offset_us DECIMAL(38, 6) NOT NULL,
    schema_version VARCHAR,
    trace_name VARCHAR,
    distributed_info JSON,
    device_properties JSON,
    -- every other top-level key of the file, verbatim
    metadata JSON,
    ingested_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, rank)
);

CREATE TABLE IF NOT EXISTS events (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    -- position of the event in the file's traceEvents array
    event_id BIGINT NOT NULL,
    name VARCHAR,
    cat VARCHAR,
    ph VARCHAR,
    ts_us DOUBLE,
    dur_us DOUBLE,
    -- computed when read, not stored: 6 B/event less on disk for one addition (bench/RESULTS.md)
    end_us DOUBLE GENERATED ALWAYS AS (ts_us + coalesce(dur_us, 0)),
    pid VARCHAR,
    tid VARCHAR,
    -- GPU stream for device-side events (args.stream, else the lane tid); -1 = whole device
    stream BIGINT,
    correlation BIGINT,
    external_id BIGINT,
    -- the timestamp exactly as written in the file
    ts_raw DECIMAL(38, 6),
    -- zstd halves args (unique ids in every object defeat the default dictionary/FSST codecs);
    -- `extra` stays on the default, which compresses its flow ids better than zstd
    args JSON USING COMPRESSION zstd,
    -- any other keys of the event object (flow ids, bp, instant scope ...)
    extra JSON
);

CREATE TABLE IF NOT EXISTS steps (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step BIGINT NOT NULL,
    name VARCHAR NOT NULL,
    start_us DOUBLE NOT NULL,
    end_us DOUBLE NOT NULL,
    dur_us DOUBLE NOT NULL,
    -- true when the trace has no ProfilerStep annotation and the step spans it all
    whole_trace BOOLEAN NOT NULL,
    event_id BIGINT
);

CREATE TABLE IF NOT EXISTS threads (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    pid VARCHAR NOT NULL,
    tid VARCHAR NOT NULL,
    name VARCHAR,
    -- main, autograd, stream or other
    role VARCHAR NOT NULL,
    event_count BIGINT NOT NULL
);
