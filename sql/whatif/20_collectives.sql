-- reads: events, traces
-- makes: _wi_comm_kernels(run_id, rank, event_id, dur_us, correlation, args, stream, ts_us, end_us)
-- makes: wi_collectives(run_id, rank, event_id, dur_us, collective, bytes, group_size, stream,
--                       ts_us, end_us)
-- makes: wi_comm_fit(run_id, collective, alpha_us, bytes_per_us, r2, samples, sizes)
-- makes macro: _wi_dtype_bytes(dtype)
-- makes macro: wi_collective(name)
-- makes macro: wi_bus_factor(collective, n, algorithm)
-- makes macro: wi_latency_steps(collective, n, algorithm)
-- makes macro: wi_gloo_transfer(transfer_us, collective, n, world_size, algorithm, bandwidth_scale,
--                               latency_us)
-- writes: comm_model
-- param: network_changed BOOLEAN
-- param: run_id INTEGER
-- Collectives of the selected runs with their message size and group size, and the
-- alpha-beta fit per run and collective (written to comm_model), for scenarios that change
-- the network.

CREATE OR REPLACE TEMP MACRO _wi_dtype_bytes(dtype) AS
    CASE lower(replace(dtype, 'c10::', ''))
        WHEN 'float' THEN 4 WHEN 'float32' THEN 4 WHEN 'int' THEN 4 WHEN 'int32' THEN 4
        WHEN 'double' THEN 8 WHEN 'float64' THEN 8 WHEN 'long' THEN 8 WHEN 'int64' THEN 8
        WHEN 'half' THEN 2 WHEN 'bfloat16' THEN 2 WHEN 'float16' THEN 2 WHEN 'short' THEN 2
        WHEN 'signed char' THEN 1 WHEN 'char' THEN 1 WHEN 'byte' THEN 1 WHEN 'unsigned char' THEN 1
        WHEN 'int8' THEN 1 WHEN 'uint8' THEN 1 WHEN 'int8_t' THEN 1 WHEN 'bool' THEN 1
    END;

-- allreduce, allgather, reducescatter, alltoall, broadcast, reduce, ... from either spelling
CREATE OR REPLACE TEMP MACRO wi_collective(name) AS
    regexp_replace(lower(regexp_replace(name, '^(nccl|gloo):', '')), '[^a-z]|base$', '', 'g');

-- Bus bytes per message byte (NCCL's bus-bandwidth factors); a group of one rank moves none.
CREATE OR REPLACE TEMP MACRO wi_bus_factor(collective, n, algorithm) AS
    CASE WHEN n <= 1 THEN 0.0
         WHEN collective = 'allreduce' AND algorithm = 'coherent' THEN (n - 1) / n
         WHEN collective = 'allreduce' THEN 2.0 * (n - 1) / n
         WHEN collective IN ('allgather', 'reducescatter', 'alltoall') THEN (n - 1) / n
         ELSE 1.0 END;

-- Latency steps of one collective (none in a group of one rank).
CREATE OR REPLACE TEMP MACRO wi_latency_steps(collective, n, algorithm) AS
    CASE WHEN n <= 1 THEN 0.0 ELSE greatest(1.0, CASE
        WHEN collective = 'allreduce' AND algorithm = 'tree' THEN 2.0 * ceil(log2(n))
        WHEN collective = 'allreduce' AND algorithm = 'coherent' THEN n - 1.0
        WHEN collective = 'allreduce' THEN 2.0 * (n - 1)
        ELSE n - 1.0 END) END;

-- A gloo collective's transfer under the scenario's network. gloo runs a process group's
-- collectives at once on its worker threads, and their flows share the link (docs/whatif.md,
-- "Collectives of one process group at once"): the measured transfer (from the last arrival to
-- the end) is the collective's bus bytes at the share of the link it got. A link
-- $bandwidth_scale times as fast serves every share that much faster, a group of another size
-- or algorithm puts its bus bytes on it, and --comm-latency-us adds its latency steps (the
-- measured transfer is taken as all bandwidth: gloo records no latency of its own).
CREATE OR REPLACE TEMP MACRO wi_gloo_transfer(transfer_us, collective, n, world_size, algorithm, bandwidth_scale,
                                              latency_us) AS
    CASE WHEN wi_bus_factor(collective, n, 'ring') > 0
         THEN transfer_us * wi_bus_factor(collective, coalesce(world_size, n), coalesce(algorithm, 'ring'))
                  / wi_bus_factor(collective, n, 'ring') / bandwidth_scale
              + coalesce(latency_us, 0.0)
                  * wi_latency_steps(collective, coalesce(world_size, n), coalesce(algorithm, 'ring'))
         ELSE transfer_us END;

-- Communication work on the device (NCCL kernels): metadata on the kernel (2024+ traces), else
-- from the `nccl:*` annotation around the call that launched it (Input Dims x Input type).
CREATE OR REPLACE TEMP TABLE _wi_comm_kernels AS
SELECT e.run_id, e.rank, e.event_id, e.dur_us, e.correlation, e.args, e.stream, e.ts_us, e.end_us
FROM events AS e
WHERE $network_changed AND e.ph = 'X' AND e.dur_us > 0 AND is_gpu_work(e.cat)
  -- the prefix tests are redundant with ILIKE but let the scan skip most rows cheaply
  AND (starts_with(e.name, 'nccl') OR starts_with(e.name, 'NCCL') OR e.name ILIKE 'nccl%')
  AND ($run_id IS NULL OR e.run_id = $run_id);

CREATE OR REPLACE TEMP TABLE wi_collectives AS
WITH run_ranks AS (
    SELECT run_id, count(*) AS ranks FROM traces WHERE $run_id IS NULL OR run_id = $run_id GROUP BY ALL
),
described AS (
    SELECT run_id, rank, event_id, dur_us, wi_collective(args ->> 'Collective name') AS collective,
           TRY_CAST(args ->> 'In msg nelems' AS DOUBLE) * _wi_dtype_bytes(args ->> 'dtype') AS bytes,
           TRY_CAST(args ->> 'Group size' AS INTEGER) AS group_size, stream, ts_us, end_us
    FROM _wi_comm_kernels WHERE args ->> 'Collective name' IS NOT NULL
),
-- the kernels without metadata, with the runtime call that launched them
launches AS MATERIALIZED (
    SELECT k.run_id, k.rank, k.event_id, k.dur_us, k.stream, k.ts_us, k.end_us,
           launch.pid, launch.tid, launch.ts_us AS launch_ts_us, launch.end_us AS launch_end_us,
           row_number() OVER () AS launch_row
    FROM _wi_comm_kernels AS k
    JOIN events AS launch
        ON launch.run_id = k.run_id AND launch.rank = k.rank AND launch.correlation = k.correlation
       AND is_runtime_category(launch.cat)
    WHERE k.args ->> 'Collective name' IS NULL
),
-- A launch's annotations are the nccl:/gloo: annotations of its thread that hold it. A join
-- on the thread with that range would compare every launch with every annotation of its
-- thread (quadratic in a thread's collectives). Instead, as cr_kernels does
-- (sql/crossrank/10_instances.sql), one ordered pass per thread gives each launch its position
-- in start order and each annotation's bounds the count of launches before them: starting
-- before its start (ties: the bound first) and at or before its end (ties: the bound last).
-- The positions between are the candidates, whose bounds are then checked: annotations of
-- one thread nest, so each launch is a candidate of the annotations around its start only.
annotations AS MATERIALIZED (
    SELECT run_id, rank, pid, tid, name, args, ts_us, end_us, row_number() OVER () AS annotation_row
    FROM events
    WHERE is_annotation_event(cat, name) AND regexp_matches(name, '^(nccl|gloo):') AND end_us IS NOT NULL
      AND (run_id, rank, pid, tid) IN (SELECT run_id, rank, pid, tid FROM launches)
),
positions AS MATERIALIZED (
    SELECT *, (sum(is_launch) OVER (PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, bound_order, launch_row
                                    ROWS UNBOUNDED PRECEDING))::BIGINT AS position
    FROM (
        SELECT run_id, rank, pid, tid, launch_ts_us AS ts_us, 1 AS bound_order, 1 AS is_launch, launch_row,
               launch_end_us, NULL::BIGINT AS annotation_row, NULL::DOUBLE AS annotation_ts_us,
               NULL::DOUBLE AS annotation_end_us
        FROM launches
        UNION ALL
        SELECT run_id, rank, pid, tid, ts_us, 0, 0, NULL, NULL, annotation_row, ts_us, end_us FROM annotations
        UNION ALL
        SELECT run_id, rank, pid, tid, end_us, 2, 0, NULL, NULL, annotation_row, ts_us, end_us FROM annotations
    )
),
annotation_positions AS (
    SELECT annotation_row, run_id, rank, pid, tid, annotation_ts_us, annotation_end_us,
           unnest(range(max(position) FILTER (WHERE bound_order = 0) + 1,
                        max(position) FILTER (WHERE bound_order = 2) + 1)) AS position
    FROM positions
    WHERE is_launch = 0
    GROUP BY annotation_row, run_id, rank, pid, tid, annotation_ts_us, annotation_end_us
),
-- (the check goes with the positions' join, on the values the positions carry)
held AS (
    SELECT p.annotation_row, l.launch_row
    FROM annotation_positions AS p
    JOIN positions AS l USING (run_id, rank, pid, tid, position)
    WHERE l.is_launch = 1 AND p.annotation_ts_us <= l.ts_us AND p.annotation_end_us >= l.launch_end_us
),
annotated AS (
    SELECT l.run_id, l.rank, l.event_id, l.dur_us,
           arg_max(wi_collective(a.name), a.ts_us) AS collective,
           arg_max(list_product(TRY_CAST(a.args -> '$."Input Dims"[0]' AS DOUBLE[]))
                   * _wi_dtype_bytes(a.args ->> '$."Input type"[0]'), a.ts_us) AS bytes,
           any_value(r.ranks) AS group_size, l.stream, l.ts_us, l.end_us
    FROM held AS h
    JOIN launches AS l USING (launch_row)
    JOIN annotations AS a USING (annotation_row)
    JOIN run_ranks AS r ON r.run_id = l.run_id
    GROUP BY l.run_id, l.rank, l.event_id, l.dur_us, l.stream, l.ts_us, l.end_us
)
SELECT * FROM described WHERE bytes > 0 AND group_size >= 1
UNION ALL
SELECT * FROM annotated WHERE bytes > 0 AND group_size >= 1;

-- Fit over the fastest sample of each size (slower ones waited for other ranks). One size, or
-- a fit that is not increasing or whose latency exceeds the quickest sample, keeps the pure
-- bandwidth model through the best observed throughput. A one-rank group moved no bytes: it
-- tells nothing about the network.
CREATE OR REPLACE TEMP TABLE wi_comm_fit AS
WITH per_size AS (
    SELECT run_id, collective, bytes * wi_bus_factor(collective, group_size, 'ring') AS bus_bytes,
           min(dur_us) AS fastest_us, count(*) AS samples
    FROM wi_collectives WHERE group_size > 1 GROUP BY ALL
),
fit AS (
    SELECT run_id, collective, regr_slope(fastest_us, bus_bytes) AS slope,
           regr_intercept(fastest_us, bus_bytes) AS intercept, regr_r2(fastest_us, bus_bytes) AS r2,
           max(bus_bytes / fastest_us) AS best_bytes_per_us, min(fastest_us) AS quickest_us,
           sum(samples) AS samples, count(*) AS sizes
    FROM per_size GROUP BY ALL
)
SELECT run_id, collective,
       CASE WHEN fitted THEN intercept ELSE 0 END AS alpha_us,
       CASE WHEN fitted THEN 1 / slope ELSE best_bytes_per_us END
           AS bytes_per_us,
       CASE WHEN sizes > 1 THEN r2 END AS r2, samples, sizes
FROM (SELECT *, sizes > 1 AND slope > 0 AND intercept >= 0 AND intercept <= quickest_us AS fitted FROM fit);

DELETE FROM comm_model WHERE run_id IN (SELECT run_id FROM wi_comm_fit);
INSERT INTO comm_model
SELECT run_id, collective, alpha_us, bytes_per_us / 1000.0, r2, samples, sizes FROM wi_comm_fit;
