-- Tables filled by `ctda-sql analyze` (one graph per run, rank, step and method).

-- the windows analyze built graphs for: one per run, rank and step
CREATE TABLE IF NOT EXISTS analysis_windows (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank
    rank INTEGER NOT NULL,
    -- step (window) number
    step BIGINT NOT NULL,
    -- name of the step or --window annotation
    name VARCHAR,
    -- window start, microseconds from the run origin
    start_us DOUBLE NOT NULL,
    -- window end, microseconds from the run origin
    end_us DOUBLE NOT NULL,
    -- the later of end_us and the end of the GPU work launched inside the window
    e2e_end_us DOUBLE NOT NULL,
    -- e2e_end_us - start_us: the step's time in microseconds
    window_us DOUBLE NOT NULL
);

-- dependency-graph nodes built by analyze: per run, rank, step and method
CREATE TABLE IF NOT EXISTS nodes (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank
    rank INTEGER NOT NULL,
    -- step (window) number
    step BIGINT NOT NULL,
    -- ctda, per_thread or cross_rank
    method VARCHAR NOT NULL,
    -- node key within the run, rank, step and method
    node_id BIGINT NOT NULL,
    -- cpu or gpu
    kind VARCHAR NOT NULL,
    -- training phase from phase_rules (forward, backward, optimizer, communication ...)
    phase VARCHAR,
    -- stream launched onto (cpu) or run on (gpu)
    stream BIGINT,
    -- OS thread (cpu) or launching thread (gpu)
    tid VARCHAR,
    -- node start, microseconds from the run origin
    start_us DOUBLE NOT NULL,
    -- node end, microseconds from the run origin
    end_us DOUBLE NOT NULL,
    -- events merged into the node
    event_count BIGINT NOT NULL,
    -- process id (cpu) or device (gpu)
    pid VARCHAR,
    -- GPU work of the previous window still running
    carry_in BOOLEAN NOT NULL,
    -- first event name, for reading paths
    label VARCHAR,
    -- the node ends with a blocking synchronization call
    ends_with_sync BOOLEAN NOT NULL,
    -- start of the blocking sync inside this node (cpu)
    sync_start_us DOUBLE,
    -- end of the blocking sync inside this node (cpu)
    sync_end_us DOUBLE,
    -- end of the blocking sync this node waited behind (cpu)
    wait_end_us DOUBLE
);

-- dependency-graph edges built by analyze
CREATE TABLE IF NOT EXISTS edges (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank
    rank INTEGER NOT NULL,
    -- step (window) number
    step BIGINT NOT NULL,
    -- ctda, per_thread or cross_rank
    method VARCHAR NOT NULL,
    -- node the edge leaves (nodes.node_id)
    src BIGINT NOT NULL,
    -- node the edge enters (nodes.node_id)
    dst BIGINT NOT NULL,
    -- sequential, call, sync or cross_thread
    type VARCHAR NOT NULL,
    -- sync found from timing, not from cuda_sync events
    inferred BOOLEAN NOT NULL,
    -- src end, or for a call edge the end of the first launch
    effective_end_us DOUBLE NOT NULL
);

-- the critical path of each step: its nodes in order with the time each counts
CREATE TABLE IF NOT EXISTS critical_path (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank
    rank INTEGER NOT NULL,
    -- step (window) number
    step BIGINT NOT NULL,
    -- ctda, per_thread or cross_rank
    method VARCHAR NOT NULL,
    -- position on the path, 1 = earliest node
    seq BIGINT NOT NULL,
    -- the node (nodes.node_id)
    node_id BIGINT NOT NULL,
    -- start of the time this node counts on the path
    counted_start_us DOUBLE NOT NULL,
    -- end of the time this node counts on the path
    counted_end_us DOUBLE NOT NULL,
    -- union of event execution inside the counted window, microseconds
    counted_us DOUBLE NOT NULL,
    -- cpu or gpu
    kind VARCHAR NOT NULL,
    -- type of the edge from this node to the next on the path
    edge_type VARCHAR,
    -- time between the previous counted window and this one
    gap_before_us DOUBLE NOT NULL,
    -- slack_before, launch_delay or between_nodes
    gap_kind VARCHAR NOT NULL
);

-- every event counted on a critical path, with its self and inclusive time
CREATE TABLE IF NOT EXISTS path_events (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank of the path (critical_path.rank)
    rank INTEGER NOT NULL,
    -- step (window) number
    step BIGINT NOT NULL,
    -- ctda, per_thread or cross_rank
    method VARCHAR NOT NULL,
    -- the path node holding the event (nodes.node_id)
    node_id BIGINT NOT NULL,
    -- the event (events.event_id)
    event_id BIGINT NOT NULL,
    -- event name
    name VARCHAR,
    -- event category
    cat VARCHAR,
    -- counted time not inside a nested counted event, microseconds
    self_us DOUBLE NOT NULL,
    -- the event's overlap with the node's counted window, microseconds
    inclusive_us DOUBLE NOT NULL
);

-- editable phase classification rules: the lowest priority whose patterns all match wins
CREATE TABLE IF NOT EXISTS phase_rules (
    -- rule order, lowest first
    priority INTEGER NOT NULL,
    -- phase given to matching events (nodes.phase)
    phase VARCHAR NOT NULL,
    -- case-insensitive regex on the top-level event name; NULL matches anything
    name_pattern VARCHAR,
    -- case-insensitive regex on the enclosing user annotations (joined by |); NULL matches anything
    annotation_pattern VARCHAR,
    -- thread role the event must be on (threads.role); NULL matches anything
    thread_role VARCHAR,
    -- what the rule is for
    note VARCHAR
);
