-- Tables and columns filled by the cross-rank analysis (`ctda-sql analyze`, method cross_rank).
-- Added with ALTER ... IF NOT EXISTS so databases made before them gain them on open.

-- Estimated clock offset of each rank against the run's lowest rank (median over matched
-- collectives of how much later this rank's clock says they ended); NULL when no estimate.
-- Subtract it from a rank's times to compare them with other ranks'.
ALTER TABLE traces ADD COLUMN IF NOT EXISTS clock_offset_us DOUBLE;

-- The rank of the node a critical_path / path_events row belongs to: the row's rank for the
-- per-rank methods; for cross_rank rows (whose rank is the rank that finished the step last)
-- the rank the path passed through.
ALTER TABLE critical_path ADD COLUMN IF NOT EXISTS node_rank INTEGER;
ALTER TABLE path_events ADD COLUMN IF NOT EXISTS node_rank INTEGER;

-- One row per collective call of every rank, matched across the ranks of its process group
-- by (pg, seq). Times are the rank's own clock; aligned_* subtract traces.clock_offset_us.
CREATE TABLE IF NOT EXISTS collective_instances (
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step BIGINT,                    -- the rank's step (window) the call was made in
    pg VARCHAR NOT NULL,            -- process group name ('default' when the trace names none)
    seq BIGINT NOT NULL,            -- order of the call among the rank's calls in the group
    name VARCHAR NOT NULL,          -- collective name (allreduce, all_to_all, ...)
    nelems BIGINT,                  -- message elements (larger of input and output)
    dtype VARCHAR,
    bytes BIGINT,                   -- nelems times the dtype's size, when both are known
    group_ranks INTEGER[],          -- ranks of the group that are in this run
    enqueue_us DOUBLE,              -- start of the CPU call (c10d op / record_param_comms)
    start_us DOUBLE NOT NULL,       -- this rank's side began executing (NCCL kernel, gloo worker, or the call)
    end_us DOUBLE NOT NULL,
    executed_on VARCHAR NOT NULL,   -- nccl_kernel, gloo_worker or cpu_call
    cpu_event_id BIGINT,            -- the CPU call
    exec_event_id BIGINT,           -- the event start_us/end_us come from
    matched BOOLEAN NOT NULL,       -- every rank of the group has this seq, same name and size
    unmatched_reason VARCHAR,
    aligned_start_us DOUBLE,
    aligned_end_us DOUBLE,
    last_rank INTEGER,              -- the rank that arrived last (matched instances)
    skew_us DOUBLE,                 -- last arrival minus first arrival, aligned clocks
    wait_us DOUBLE                  -- how long this rank waited for the last arrival (0: its side, a
                                    -- buffered send, ended before it)
);

-- The stretches of each rank the cross-rank path runs through: hop 1 is the rank that
-- finished the step last; each later hop is the rank whose late arrival at a collective
-- (pg, seq) gated the previous one. Times are the hop rank's own clock.
CREATE TABLE IF NOT EXISTS cross_rank_segments (
    run_id INTEGER NOT NULL,
    step BIGINT NOT NULL,
    hop INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    from_us DOUBLE NOT NULL,        -- where the path left this rank (or the window start)
    to_us DOUBLE NOT NULL,          -- where it entered this rank (step end, or the arrival)
    gate_pg VARCHAR,                -- the collective through which the path left this rank
    gate_seq BIGINT
);
