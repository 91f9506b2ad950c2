-- Warehouse tables filled by `ctda-sql ingest`. Times are microseconds (DOUBLE)
-- relative to the run's origin (runs.origin_ts), so ranks of one run compare directly.
--
-- Each table and column is documented where it is defined (warehouse/core/column_docs.py reads
-- it into COMMENT ON, which `.schema TABLE`, completion and duckdb_columns() show): the `--` lines
-- directly above a table's definition describe the table, those directly above a column (or
-- above the ALTER TABLE that adds it) describe the column. A comment after a definition on its
-- line is a note for whoever edits the file.
CREATE SEQUENCE IF NOT EXISTS run_id_seq START 1;

-- one row per ingested run (a job: one or more rank files)
CREATE TABLE IF NOT EXISTS runs (
    -- run key
    run_id INTEGER PRIMARY KEY,
    -- run name (--run, else the folder or file name)
    name VARCHAR NOT NULL UNIQUE,
    -- when the run was first ingested
    ingested_at TIMESTAMP NOT NULL,
    -- experiment metadata from --meta KEY=VALUE, as a JSON object
    meta JSON NOT NULL,
    -- epoch microseconds subtracted from every raw timestamp of the run
    origin_ts DECIMAL(38, 6) NOT NULL
);

-- one row per rank file of a run
CREATE TABLE IF NOT EXISTS traces (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank of the file
    rank INTEGER NOT NULL,
    -- path of the file as ingested
    source_path VARCHAR NOT NULL,
    -- SHA-256 of the file bytes; a re-ingest of the same file is skipped
    file_sha256 VARCHAR NOT NULL,
    -- size of the file in bytes
    file_bytes BIGINT NOT NULL,
    -- ranks in the job (distributedInfo.world_size)
    world_size INTEGER,
    -- traceEvents in the file (every one is in events)
    event_count BIGINT NOT NULL,
    -- where the rank came from: distributedInfo, file name or default
    rank_source VARCHAR NOT NULL,
    -- us, or ns for microsecond values carrying nanosecond digits
    time_resolution VARCHAR NOT NULL,
    -- added to raw ts to get epoch microseconds (baseTimeNanoseconds / 1000)
    ts_offset_us DECIMAL(38, 6) NOT NULL,
    -- the file's schemaVersion
    schema_version VARCHAR,
    -- the file's traceName
    trace_name VARCHAR,
    -- the file's distributedInfo object
    distributed_info JSON,
    -- the file's deviceProperties array
    device_properties JSON,
    -- every other top-level key of the file, verbatim
    metadata JSON,
    -- when the file was ingested
    ingested_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, rank)
);

-- every traceEvent of every file, none dropped; times in us from the run origin
CREATE TABLE IF NOT EXISTS events (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank of the file the event comes from
    rank INTEGER NOT NULL,
    -- position of the event in the file's traceEvents array
    event_id BIGINT NOT NULL,
    -- event name (operator, kernel, annotation ...)
    name VARCHAR,
    -- Kineto category: cpu_op, kernel, cuda_runtime, gpu_memcpy, user_annotation ...
    cat VARCHAR,
    -- trace phase: X complete, i instant, s/f flow, M metadata ...
    ph VARCHAR,
    -- start, microseconds from the run origin
    ts_us DOUBLE,
    -- duration in microseconds (NULL for events without one)
    dur_us DOUBLE,
    -- ts_us + dur_us, computed when read (ts_us where dur_us is NULL)
    end_us DOUBLE GENERATED ALWAYS AS (ts_us + coalesce(dur_us, 0)),  -- not stored: 6 B/event less on disk for one addition (bench/RESULTS.md)
    -- process id, or the device for GPU events
    pid VARCHAR,
    -- thread id, or the stream lane for GPU events
    tid VARCHAR,
    -- GPU stream of device-side events (args.stream, else the lane tid); -1 = whole device
    stream BIGINT,
    -- links a runtime launch call to the GPU work it launched
    correlation BIGINT,
    -- links GPU work and runtime calls to the CPU operator that issued them
    external_id BIGINT,
    -- the timestamp exactly as written in the file
    ts_raw DECIMAL(38, 6),
    -- the event's args object (JSON)
    args JSON USING COMPRESSION zstd,  -- zstd halves args: unique ids in every object defeat the default dictionary/FSST codecs
    -- any other keys of the event object (flow ids, bp, instant scope ...)
    extra JSON  -- on the default codec, which compresses its flow ids better than zstd
);

-- training steps (ProfilerStep#N annotations) per rank
CREATE TABLE IF NOT EXISTS steps (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank
    rank INTEGER NOT NULL,
    -- step number (N of ProfilerStep#N)
    step BIGINT NOT NULL,
    -- the annotation's name
    name VARCHAR NOT NULL,
    -- step start, microseconds from the run origin
    start_us DOUBLE NOT NULL,
    -- step end, microseconds from the run origin
    end_us DOUBLE NOT NULL,
    -- step duration in microseconds
    dur_us DOUBLE NOT NULL,
    -- true when the trace has no ProfilerStep annotation and the step spans it all
    whole_trace BOOLEAN NOT NULL,
    -- the annotation event (events.event_id)
    event_id BIGINT
);

-- CPU threads and GPU stream lanes of each rank, with their role
CREATE TABLE IF NOT EXISTS threads (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank
    rank INTEGER NOT NULL,
    -- process id (events.pid)
    pid VARCHAR NOT NULL,
    -- thread id or stream lane (events.tid)
    tid VARCHAR NOT NULL,
    -- thread name from the trace metadata
    name VARCHAR,
    -- main, autograd, stream or other
    role VARCHAR NOT NULL,
    -- events on this thread
    event_count BIGINT NOT NULL
);
