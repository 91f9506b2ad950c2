-- Tables filled by `ctda-sql whatif` (one row per scenario, run, rank and step).

-- predicted step times of each what-if scenario: one row per scenario, run, rank and step
CREATE TABLE IF NOT EXISTS whatif_steps (
    -- scenario name (--name, with KEY=V for each --sweep value)
    scenario VARCHAR NOT NULL,
    -- the scenario's changes as given (JSON)
    changes JSON NOT NULL,
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank
    rank INTEGER NOT NULL,
    -- step (window) number
    step BIGINT NOT NULL,
    -- measured step time, microseconds (analysis_windows.window_us)
    measured_us DOUBLE NOT NULL,
    -- the unchanged replay, microseconds (reproduces measured_us)
    replay_us DOUBLE NOT NULL,
    -- the replay with the changes, microseconds
    predicted_us DOUBLE NOT NULL,
    -- replay_us / predicted_us
    speedup DOUBLE NOT NULL,
    -- where the step starts in the unchanged replay, microseconds from the replay's origin (the
    -- run's earliest replayed step start); NULL: stored before this column
    replay_start_us DOUBLE,
    -- where the step ends in the unchanged replay (replay_start_us + replay_us), microseconds from
    -- the replay's origin; NULL: stored before this column
    replay_end_us DOUBLE,
    -- where the step starts in the replay with the changes, microseconds from the replay's origin:
    -- earlier than replay_start_us when earlier steps got shorter, and such a step may wait longer
    -- for another rank; NULL: stored before this column
    predicted_start_us DOUBLE,
    -- where the step ends in the replay with the changes (predicted_start_us + predicted_us),
    -- microseconds from the replay's origin; NULL: stored before this column
    predicted_end_us DOUBLE
);

-- databases made before the start and end columns gain them (described above)

ALTER TABLE whatif_steps ADD COLUMN IF NOT EXISTS replay_start_us DOUBLE;
ALTER TABLE whatif_steps ADD COLUMN IF NOT EXISTS replay_end_us DOUBLE;
ALTER TABLE whatif_steps ADD COLUMN IF NOT EXISTS predicted_start_us DOUBLE;
ALTER TABLE whatif_steps ADD COLUMN IF NOT EXISTS predicted_end_us DOUBLE;

-- the predicted critical path of each what-if scenario, run, rank and step
CREATE TABLE IF NOT EXISTS whatif_path (
    -- scenario name (whatif_steps.scenario)
    scenario VARCHAR NOT NULL,
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank
    rank INTEGER NOT NULL,
    -- step (window) number
    step BIGINT NOT NULL,
    -- position on the predicted path, 1 = earliest node
    seq BIGINT NOT NULL,
    -- the node (nodes.node_id, method ctda)
    node_id BIGINT NOT NULL,
    -- cpu or gpu
    kind VARCHAR NOT NULL,
    -- the node's label (nodes.label)
    label VARCHAR,
    -- the node's measured duration, microseconds
    measured_us DOUBLE NOT NULL,
    -- its duration under the changes, microseconds
    predicted_us DOUBLE NOT NULL
);

-- alpha-beta fit of each run's collectives: time = alpha + bus bytes / bus bandwidth
CREATE TABLE IF NOT EXISTS comm_model (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- collective name
    collective VARCHAR NOT NULL,
    -- fitted latency, microseconds (0 when the fit falls back to throughput only)
    alpha_us DOUBLE NOT NULL,
    -- fitted bus bandwidth, GB/s
    bus_bw_gbps DOUBLE NOT NULL,
    -- fit quality over the fastest sample of each size (NULL: one size)
    r2 DOUBLE,
    -- collective calls measured, over all sizes
    samples BIGINT NOT NULL,
    -- distinct message sizes
    sizes BIGINT NOT NULL
);

-- whatif --cluster: the links that limited the collectives of each step (the link each
-- collective kept busy longest), per scenario, run, rank and step (sql/whatif/cluster_links.sql)
CREATE TABLE IF NOT EXISTS whatif_cluster_links (
    -- scenario name, as in whatif_steps
    scenario VARCHAR NOT NULL,
    -- runs.run_id
    run_id INTEGER NOT NULL,
    -- rank whose step holds the collectives
    rank INTEGER NOT NULL,
    -- step (ProfilerStep number)
    step BIGINT NOT NULL,
    -- the link and its direction: devN up|down (a device to its host switch), hostN up|down (a
    -- host to the network), leafN up|down (a leaf to the spine), shared (the one shared link)
    link VARCHAR NOT NULL,
    -- collectives of the step that this link limited
    collectives BIGINT NOT NULL,
    -- time the link was busy carrying those collectives: bytes through it / its bandwidth, µs
    busy_us DOUBLE NOT NULL,
    -- busy_us / the predicted step (whatif_steps.predicted_us)
    share_of_step DOUBLE
);
