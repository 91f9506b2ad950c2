-- Tables filled by `ctda-sql advise` (warehouse/advice/advise.py): the run's last advice, one
-- row per finding and per causal-profile region; each advise of a run replaces its rows.

-- what to fix, ranked by the saving the replay predicts: the last `ctda-sql advise` of each run
CREATE TABLE IF NOT EXISTS advice_findings (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank of the finding, 1 = the largest saving
    place INTEGER NOT NULL,
    -- stable rule id (data_loading, host_sync, pageable_memcpy, launch_bound, exposed_comm,
    -- straggler, pipeline_bubble, optimizer, unexplained_idle)
    rule VARCHAR NOT NULL,
    -- what the rule found, in a line
    title VARCHAR NOT NULL,
    -- one concrete fix a PyTorch user can act on (NULL: none can be named from the trace)
    fix VARCHAR,
    -- path time and share, counts, steps and ranks, top events, and why a saving was not replayed
    evidence VARCHAR NOT NULL,
    -- the ctda-sql whatif arguments whose replay gives saving_us
    scenario VARCHAR,
    -- median over steps of (replayed job step - step predicted under the scenario), us; NULL
    -- when not replayed (evidence says why)
    saving_us DOUBLE,
    -- saving_us / the median measured step
    saving_share DOUBLE,
    -- the pattern's time on the critical path per step that holds it, us
    path_us DOUBLE NOT NULL,
    -- steps (windows) where the pattern is on the path
    steps BIGINT NOT NULL,
    -- ranks where the pattern is on the path
    ranks INTEGER[] NOT NULL
);

-- the causal profile of each run's last advise: the path's largest regions and what the replay
-- predicts they buy at half and at zero time
CREATE TABLE IF NOT EXISTS advice_profile (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank of the region by path time, 1 = the largest
    place INTEGER NOT NULL,
    -- annotation, op, kernel or collective
    kind VARCHAR NOT NULL,
    -- the region's event name
    label VARCHAR NOT NULL,
    -- the rank whose collectives the region is; NULL: the region on every rank
    rank INTEGER,
    -- the region's critical-path time per step that holds it, us
    path_us DOUBLE NOT NULL,
    -- the replay's median saving per step if the region took half its time, us
    saving_at_half_us DOUBLE,
    -- the replay's median saving per step if the region took no time, us
    saving_at_zero_us DOUBLE,
    -- why the saving at zero is under half the path time, or above it, when it is: the reason of
    -- the step that disagrees most
    note VARCHAR
);

-- Added with ALTER ... IF NOT EXISTS so databases made before it gain it on open
-- (warehouse/advice/profile.py, docs/method.md "Path time and saving at zero").

-- per step of the job: the rank whose path holds the region most, its path time there (us), the
-- saving at zero of the job's step (us; where the job's step is a window of a rank that ran a
-- whole step ahead, of its own part, from the previous step's end), overlap_us (the time that
-- window shares with the previous step, us; 0 elsewhere), and the reason (NULL where they agree:
-- the saving is at least half the path time and at most 5% + 1 us above it): a near-critical
-- alternative (the rank, stream or thread the replayed path moves to, and by how much) or a wait
-- outside the trace
ALTER TABLE advice_profile ADD COLUMN IF NOT EXISTS
    per_step STRUCT(step BIGINT, rank INTEGER, path_us DOUBLE, saving_at_zero_us DOUBLE, overlap_us DOUBLE,
                    reason VARCHAR)[];
-- databases made before overlap_us gain it (NULL in their stored rows); fields cast by name
ALTER TABLE advice_profile ALTER per_step
    TYPE STRUCT(step BIGINT, rank INTEGER, path_us DOUBLE, saving_at_zero_us DOUBLE, overlap_us DOUBLE,
                reason VARCHAR)[];
