-- reads: critical_path, nodes, _adv_windows, events
-- makes: rows(rule, title, fix, path_us, windows, ranks, occurrences, top_events, scale_names,
--             scale_categories, scale_factors, scale_ranks, bandwidth_scale, drop_syncs,
--             not_replayable, detail)
-- rule: host_sync. The CPU blocks on the GPU inside the step (`.item()`, `.cpu()`, `.tolist()`,
-- cudaStreamSynchronize, cudaDeviceSynchronize, a blocking device-to-host copy): the CPU's
-- work after each sync cannot overlap the GPU work before it.
-- Its row is a finding (warehouse/advice/advise.py FINDING_COLUMNS), or there is none.
-- Scenario: --drop-syncs, no CPU node waits for GPU work.
WITH syncs AS (
    -- blocking syncs whose wait the path went through: the CPU node after the sync (its wait
    -- return) is on the path, and the node that ends in the sync is the one just before it
    SELECT h.run_id, h.rank, h.step, h.node_id, h.label, h.sync_end_us - h.sync_start_us AS wait_us,
           h.pid, h.tid, h.sync_start_us, h.sync_end_us
    FROM critical_path AS c
    JOIN nodes AS r USING (run_id, rank, step, method, node_id)
    JOIN nodes AS h
        ON h.run_id = r.run_id AND h.rank = r.rank AND h.step = r.step AND h.method = r.method
       AND h.kind = 'cpu' AND h.ends_with_sync AND h.pid IS NOT DISTINCT FROM r.pid AND h.tid = r.tid
       AND h.sync_end_us = r.start_us
    SEMI JOIN _adv_windows AS w ON w.run_id = c.run_id AND w.rank = c.rank AND w.step = c.step
    WHERE c.method = 'ctda' AND r.kind = 'cpu' AND r.wait_end_us IS NOT NULL
),
callers AS (
    -- the op that made each sync (the outermost op around the sync call): item, cpu, tolist ...
    SELECT s.run_id, s.rank, s.step, s.node_id, s.wait_us,
           coalesce(arg_min(o.name, o.ts_us), any_value(s.label)) AS caller
    FROM syncs AS s
    LEFT JOIN events AS o
        ON o.run_id = s.run_id AND o.rank = s.rank AND o.pid IS NOT DISTINCT FROM s.pid AND o.tid = s.tid
       AND o.ph = 'X' AND is_cpu_op_event(o.cat, o.name) AND o.ts_us <= s.sync_start_us AND o.end_us >= s.sync_end_us
    GROUP BY ALL
),
names AS (
    SELECT caller, sum(wait_us) AS wait_us, count(*) AS occurrences FROM callers GROUP BY caller
    ORDER BY wait_us DESC, caller LIMIT 5
)
SELECT 'host_sync' AS rule,
       'The CPU waits for the GPU inside the step' AS title,
       'Remove host syncs from the step: keep losses and metrics on the GPU and read them (.item(), .cpu(), '
           || '.tolist(), print) once every N steps; make copies to the host non_blocking=True into pinned memory; '
           || 'avoid ops with data-dependent shapes (nonzero, masked_select) in the loop' AS fix,
       (SELECT sum(wait_us) FROM callers) AS path_us,
       (SELECT count(DISTINCT (rank, step)) FROM callers) AS windows,
       (SELECT list(DISTINCT rank ORDER BY rank) FROM callers) AS ranks,
       (SELECT count(*) FROM callers) AS occurrences,
       list(caller ORDER BY wait_us DESC, caller) AS top_events,
       []::VARCHAR[] AS scale_names, []::VARCHAR[] AS scale_categories, []::DOUBLE[] AS scale_factors,
       []::VARCHAR[] AS scale_ranks, NULL::DOUBLE AS bandwidth_scale, true AS drop_syncs,
       NULL::VARCHAR AS not_replayable,
       'path_us is the time the CPU sat in the syncs; while it waited the GPU held the path, and the CPU '
           || 'work after each sync could not overlap it' AS detail
FROM names
HAVING count(*) > 0;
