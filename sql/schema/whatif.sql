-- Tables filled by `ctda-sql whatif` (one row per scenario, run, rank and step).

CREATE TABLE IF NOT EXISTS whatif_steps (
    scenario VARCHAR NOT NULL,
    changes JSON NOT NULL,          -- the scenario's changes, as given
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step BIGINT NOT NULL,
    measured_us DOUBLE NOT NULL,    -- analysis_windows.window_us
    replay_us DOUBLE NOT NULL,      -- the unchanged replay (reproduces measured_us)
    predicted_us DOUBLE NOT NULL,   -- the replay with the changes
    speedup DOUBLE NOT NULL,        -- replay_us / predicted_us
    -- where the step starts and ends in each replay, µs from the replay's origin (the run's
    -- earliest replayed step start): a step that starts sooner may wait longer (NULL: stored
    -- before these columns)
    replay_start_us DOUBLE,
    replay_end_us DOUBLE,
    predicted_start_us DOUBLE,
    predicted_end_us DOUBLE
);
-- databases made before the start and end columns gain them
ALTER TABLE whatif_steps ADD COLUMN IF NOT EXISTS replay_start_us DOUBLE;
ALTER TABLE whatif_steps ADD COLUMN IF NOT EXISTS replay_end_us DOUBLE;
ALTER TABLE whatif_steps ADD COLUMN IF NOT EXISTS predicted_start_us DOUBLE;
ALTER TABLE whatif_steps ADD COLUMN IF NOT EXISTS predicted_end_us DOUBLE;

CREATE TABLE IF NOT EXISTS whatif_path (
    scenario VARCHAR NOT NULL,
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step BIGINT NOT NULL,
    seq BIGINT NOT NULL,            -- 1 = earliest node on the predicted path
    node_id BIGINT NOT NULL,        -- nodes.node_id (method ctda)
    kind VARCHAR NOT NULL,
    label VARCHAR,
    measured_us DOUBLE NOT NULL,    -- the node's measured duration
    predicted_us DOUBLE NOT NULL    -- its duration under the changes
);

-- Alpha-beta fit of each run's collectives: time = alpha + bus bytes / bus bandwidth.
CREATE TABLE IF NOT EXISTS comm_model (
    run_id INTEGER NOT NULL,
    collective VARCHAR NOT NULL,
    alpha_us DOUBLE NOT NULL,
    bus_bw_gbps DOUBLE NOT NULL,
    r2 DOUBLE,                      -- fit quality over the fastest sample of each size (NULL: one size)
    samples BIGINT NOT NULL,
    sizes BIGINT NOT NULL           -- distinct message sizes
);
