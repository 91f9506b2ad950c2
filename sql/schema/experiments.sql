-- Experiment metadata keyed by run name, filled by `ctda-sql meta load`. Loading
-- re-creates the table with the union of old and new columns, so it starts as just `run`;
-- the loaded columns carry no description (ingest/experiments.py gives the table and `run`
-- theirs back after each load).

-- experiment metadata keyed by run name, one column per loaded field (ctda-sql meta load)
CREATE TABLE IF NOT EXISTS experiments (
    -- run name (runs.name)
    run VARCHAR PRIMARY KEY
);

-- --meta KEY=VALUE pairs as columns; experiments.refresh_run_meta re-creates it with one
-- column per key after every ingest (a view cannot grow columns by itself).
CREATE VIEW IF NOT EXISTS run_meta AS SELECT run_id, name AS run FROM runs;
