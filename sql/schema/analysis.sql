-- Tables filled by `ctda-sql analyze` (one graph per run, rank, step and method).

CREATE TABLE IF NOT EXISTS analysis_windows (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step BIGINT NOT NULL,
    name VARCHAR,
    start_us DOUBLE NOT NULL,
    end_us DOUBLE NOT NULL,
    -- the later of the window end and the end of the GPU work launched inside it
    e2e_end_us DOUBLE NOT NULL,
    window_us DOUBLE NOT NULL
);

CREATE TABLE IF NOT EXISTS nodes (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step BIGINT NOT NULL,
    method VARCHAR NOT NULL,
    node_id BIGINT NOT NULL,
    kind VARCHAR NOT NULL,          -- cpu or gpu
    phase VARCHAR,
    stream BIGINT,                  -- stream launched onto (cpu) or run on (gpu)
    tid VARCHAR,                    -- OS thread (cpu) or launching thread (gpu)
    start_us DOUBLE NOT NULL,
    end_us DOUBLE NOT NULL,
    event_count BIGINT NOT NULL,
    pid VARCHAR,
    carry_in BOOLEAN NOT NULL,      -- GPU work of the previous window still running
    label VARCHAR,                  -- first event name, for reading paths
    ends_with_sync BOOLEAN NOT NULL,
    sync_start_us DOUBLE,           -- blocking sync inside this node (cpu)
    sync_end_us DOUBLE,
    wait_end_us DOUBLE              -- end of the blocking sync this node waited behind (cpu)
);

CREATE TABLE IF NOT EXISTS edges (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step BIGINT NOT NULL,
    method VARCHAR NOT NULL,
    src BIGINT NOT NULL,
    dst BIGINT NOT NULL,
    type VARCHAR NOT NULL,          -- sequential, call, sync, cross_thread
    inferred BOOLEAN NOT NULL,      -- sync found from timing, not from cuda_sync events
    effective_end_us DOUBLE NOT NULL -- src end, or for a call edge the end of the first launch
);

CREATE TABLE IF NOT EXISTS critical_path (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step BIGINT NOT NULL,
    method VARCHAR NOT NULL,
    seq BIGINT NOT NULL,            -- 1 = earliest node on the path
    node_id BIGINT NOT NULL,
    counted_start_us DOUBLE NOT NULL,
    counted_end_us DOUBLE NOT NULL,
    counted_us DOUBLE NOT NULL,     -- union of event execution inside the counted window
    kind VARCHAR NOT NULL,
    edge_type VARCHAR,              -- type of the edge from this node to the next on the path
    gap_before_us DOUBLE NOT NULL,  -- time between the previous counted window and this one
    gap_kind VARCHAR NOT NULL       -- slack_before, launch_delay or between_nodes
);

CREATE TABLE IF NOT EXISTS path_events (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step BIGINT NOT NULL,
    method VARCHAR NOT NULL,
    node_id BIGINT NOT NULL,
    event_id BIGINT NOT NULL,
    name VARCHAR,
    cat VARCHAR,
    self_us DOUBLE NOT NULL,        -- counted time not inside a nested counted event
    inclusive_us DOUBLE NOT NULL
);

-- Phase classification rules: the lowest priority whose patterns all match wins.
-- Patterns are case-insensitive regular expressions; NULL matches anything.
CREATE TABLE IF NOT EXISTS phase_rules (
    priority INTEGER NOT NULL,
    phase VARCHAR NOT NULL,
    name_pattern VARCHAR,
    annotation_pattern VARCHAR,
    thread_role VARCHAR,
    note VARCHAR
);
