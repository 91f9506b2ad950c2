-- Tables and columns filled by the cross-rank analysis (`ctda-sql analyze`, method cross_rank).
-- Added with ALTER ... IF NOT EXISTS so databases made before them gain them on open.

-- estimated clock offset against the run's lowest rank, microseconds (subtract to align; NULL:
-- no estimate): the median over matched collectives of how much later this rank's clock says
-- they ended
ALTER TABLE traces ADD COLUMN IF NOT EXISTS clock_offset_us DOUBLE;

-- rank of the node: rank for per-rank methods, the rank the path passed through for cross_rank
-- (where rank is the rank that finished the step last)
ALTER TABLE critical_path ADD COLUMN IF NOT EXISTS node_rank INTEGER;
-- rank of the node and event: rank for per-rank methods, the rank the path passed through for
-- cross_rank (where rank is the rank that finished the step last)
ALTER TABLE path_events ADD COLUMN IF NOT EXISTS node_rank INTEGER;

-- one row per collective call of every rank, matched across its process group by (pg, seq);
-- times are the rank's own clock, aligned_* subtract traces.clock_offset_us
CREATE TABLE IF NOT EXISTS collective_instances (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- rank that made the call
    rank INTEGER NOT NULL,
    -- the rank's step (window) the call was made in
    step BIGINT,
    -- process group name ('default' when the trace names none)
    pg VARCHAR NOT NULL,
    -- order of the call among the rank's calls in the group
    seq BIGINT NOT NULL,
    -- collective name (allreduce, all_to_all ...)
    name VARCHAR NOT NULL,
    -- message elements (larger of input and output)
    nelems BIGINT,
    -- element type of the message
    dtype VARCHAR,
    -- nelems times the dtype's size, when both are known
    bytes BIGINT,
    -- ranks of the group that are in this run
    group_ranks INTEGER[],
    -- start of the CPU call (c10d op / record_param_comms), rank's clock, microseconds
    enqueue_us DOUBLE,
    -- when this rank's side began executing (NCCL kernel, gloo worker or the call), rank's clock,
    -- microseconds
    start_us DOUBLE NOT NULL,
    -- when this rank's side ended, rank's clock, microseconds
    end_us DOUBLE NOT NULL,
    -- nccl_kernel, gloo_worker or cpu_call
    executed_on VARCHAR NOT NULL,
    -- the CPU call (events.event_id)
    cpu_event_id BIGINT,
    -- the event start_us and end_us come from (events.event_id)
    exec_event_id BIGINT,
    -- every rank of the group has this seq, with the same name and size
    matched BOOLEAN NOT NULL,
    -- why the instance is not matched
    unmatched_reason VARCHAR,
    -- start_us minus traces.clock_offset_us
    aligned_start_us DOUBLE,
    -- end_us minus traces.clock_offset_us
    aligned_end_us DOUBLE,
    -- the rank that arrived last (matched instances)
    last_rank INTEGER,
    -- last arrival minus first arrival, aligned clocks, microseconds
    skew_us DOUBLE,
    -- how long this rank waited for the last arrival (last arrival minus its own, aligned clocks),
    -- microseconds; 0 where its side ended before the last arrival (a buffered send that
    -- returned before its receiver arrived)
    wait_us DOUBLE
);

-- the stretches of each rank the cross-rank critical path runs through, per step
CREATE TABLE IF NOT EXISTS cross_rank_segments (
    -- run key (runs.run_id)
    run_id INTEGER NOT NULL,
    -- step (window) number of the rank that finished the step last
    step BIGINT NOT NULL,
    -- 1 = the rank that finished last; each later hop the rank whose late arrival gated the
    -- previous one
    hop INTEGER NOT NULL,
    -- rank of this stretch
    rank INTEGER NOT NULL,
    -- where the path left this rank (or the window start), rank's clock, microseconds
    from_us DOUBLE NOT NULL,
    -- where the path entered this rank (step end, or its arrival), rank's clock, microseconds
    to_us DOUBLE NOT NULL,
    -- process group of the collective through which the path left this rank
    gate_pg VARCHAR,
    -- seq of that collective (collective_instances.seq)
    gate_seq BIGINT
);
