-- Tables filled by `ctda-sql advise` (warehouse/advice/advise.py): the run's last advice, one
-- row per finding and per causal-profile region; each advise of a run replaces its rows.

CREATE TABLE IF NOT EXISTS advice_findings (
    run_id INTEGER NOT NULL,
    place INTEGER NOT NULL,         -- 1 = the largest saving
    rule VARCHAR NOT NULL,
    title VARCHAR NOT NULL,
    fix VARCHAR,
    evidence VARCHAR NOT NULL,
    scenario VARCHAR,               -- the whatif arguments that replay the fix
    saving_us DOUBLE,               -- NULL: not replayed (evidence says why)
    saving_share DOUBLE,
    path_us DOUBLE NOT NULL,
    steps BIGINT NOT NULL,
    ranks INTEGER[] NOT NULL
);

CREATE TABLE IF NOT EXISTS advice_profile (
    run_id INTEGER NOT NULL,
    place INTEGER NOT NULL,
    kind VARCHAR NOT NULL,          -- annotation, op, kernel or collective
    label VARCHAR NOT NULL,
    rank INTEGER,                   -- a rank's collectives; NULL: every rank
    path_us DOUBLE NOT NULL,
    saving_at_half_us DOUBLE,
    saving_at_zero_us DOUBLE,
    note VARCHAR
);

-- Added with ALTER ... IF NOT EXISTS so databases made before it gain it on open: each region's
-- path time beside the replay's saving at zero, per step, with the slack named where they
-- disagree (warehouse/advice/advise.py, docs/method.md "Path time and saving at zero").
ALTER TABLE advice_profile ADD COLUMN IF NOT EXISTS
    per_step STRUCT(step BIGINT, rank INTEGER, path_us DOUBLE, saving_at_zero_us DOUBLE, reason VARCHAR)[];
