-- reads: events, _adv_events
-- makes: rows(rule, title, fix, path_us, windows, ranks, occurrences, top_events, scale_names,
--             scale_categories, scale_factors, scale_ranks, bandwidth_scale, drop_syncs,
--             not_replayable, detail)
-- param: run_id INTEGER
-- rule: pageable_memcpy. Host-to-device copies from pageable memory on the path: the CPU blocks
-- in the copy call (the driver stages the bytes through a pinned buffer) and the copy runs
-- slower than from pinned memory.
-- Its row is a finding (warehouse/advice/advise.py FINDING_COLUMNS), or there is none.
-- Scenario: the copy call returns at once (non_blocking=True) and the copy runs at pinned speed:
-- the trace's own pinned host-to-device throughput when it has pinned copies of 1 MB or more,
-- else 4x the pageable throughput (PCIe gen4/gen5 pinned copies run 3-6x faster than pageable).
WITH copies AS (
    SELECT run_id, rank, correlation FROM events
    WHERE run_id = $run_id AND cat IN ('gpu_memcpy', 'Memcpy') AND name ILIKE 'Memcpy HtoD (Pageable%'
),
pageable AS (
    -- on the path as the copy itself, or as the CPU blocked in its copy call
    SELECT p.run_id, p.rank, p.step, p.name, p.self_us
    FROM _adv_events AS p
    JOIN events AS e ON e.run_id = p.run_id AND e.rank = p.rank AND e.event_id = p.event_id
    SEMI JOIN copies AS c ON c.run_id = e.run_id AND c.rank = e.rank AND c.correlation = e.correlation
    WHERE p.kind IN ('kernel', 'runtime')
),
throughput AS (
    SELECT avg(TRY_CAST(args->>'bytes' AS DOUBLE) / dur_us) FILTER (WHERE name ILIKE 'Memcpy HtoD (Pageable%') AS pageable_bpus,
           avg(TRY_CAST(args->>'bytes' AS DOUBLE) / dur_us)
               FILTER (WHERE name ILIKE 'Memcpy HtoD (Pinned%' AND TRY_CAST(args->>'bytes' AS DOUBLE) >= 1e6) AS pinned_bpus
    FROM events
    WHERE run_id = $run_id AND cat IN ('gpu_memcpy', 'Memcpy') AND dur_us > 0
),
factor AS (
    SELECT least(1.0, coalesce(pageable_bpus / pinned_bpus, 0.25)) AS copy_factor,
           pinned_bpus IS NOT NULL AS measured
    FROM throughput
)
SELECT 'pageable_memcpy' AS rule,
       'Host-to-device copies from pageable memory block the CPU' AS title,
       'Copy from pinned memory without blocking: DataLoader(pin_memory=True) or tensor.pin_memory(), then '
           || '.to(device, non_blocking=True), so the CPU goes on launching while the copy runs' AS fix,
       sum(self_us) AS path_us, count(DISTINCT (rank, step)) AS windows,
       list(DISTINCT rank ORDER BY rank) AS ranks, count(*) AS occurrences,
       ['Memcpy HtoD (Pageable -> Device)'] AS top_events,
       ['cudaMemcpyAsync', 'Memcpy HtoD (Pageable*'] AS scale_names,
       ['cuda_runtime', 'gpu_memcpy'] AS scale_categories,
       [0.0, any_value(f.copy_factor)] AS scale_factors, ['', ''] AS scale_ranks,
       NULL::DOUBLE AS bandwidth_scale, false AS drop_syncs, NULL::VARCHAR AS not_replayable,
       'the pinned copy is taken to run at ' || round(any_value(f.copy_factor), 2)
           || CASE WHEN any_value(f.measured) THEN ' of the pageable time (the trace''s pinned copies)'
                   ELSE ' of the pageable time (assumed: no pinned copies in the trace)' END AS detail
FROM pageable, factor AS f
HAVING count(*) > 0;
