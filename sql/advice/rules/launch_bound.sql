-- reads: events, _adv_windows, critical_path, nodes, _adv_events
-- makes: rows(rule, title, fix, path_us, windows, ranks, occurrences, top_events, scale_names,
--             scale_categories, scale_factors, scale_ranks, bandwidth_scale, drop_syncs,
--             not_replayable, detail)
-- param: run_id INTEGER
-- rule: launch_bound. Steps of many short kernels where the path runs on the CPU launching them:
-- the GPU idles between kernels while the CPU's per-op overhead (dispatch, launch) sets the pace.
-- Its row is a finding (warehouse/advice/advise.py FINDING_COLUMNS), or there is none.
-- A window is launch-bound when it ran at least 50 kernels with a median under 20 us, and CPU
-- nodes that launch GPU work hold at least half its path.
-- Scenario: the CPU ops and launch calls take no time (a CUDA graph replays the step with one launch).
WITH kernels AS (
    SELECT n.run_id, n.rank, n.step, count(*) AS kernels, median(e.dur_us) AS median_kernel_us
    FROM events AS e
    JOIN _adv_windows AS n ON n.run_id = e.run_id AND n.rank = e.rank
        AND e.ts_us >= n.start_us AND e.ts_us < n.start_us + n.window_us
    WHERE e.run_id = $run_id AND e.ph = 'X' AND e.cat IN ('kernel', 'Kernel')
    GROUP BY ALL
),
launching AS (
    SELECT c.run_id, c.rank, c.step, sum(c.counted_us) AS path_us
    FROM critical_path AS c
    JOIN nodes AS n USING (run_id, rank, step, method, node_id)
    SEMI JOIN _adv_windows AS w USING (run_id, rank, step)
    WHERE c.method = 'ctda' AND n.kind = 'cpu' AND n.stream IS NOT NULL
    GROUP BY ALL
),
bound AS (
    SELECT l.*, k.kernels, k.median_kernel_us
    FROM launching AS l
    JOIN kernels AS k USING (run_id, rank, step)
    JOIN _adv_windows AS w USING (run_id, rank, step)
    WHERE k.kernels >= 50 AND k.median_kernel_us < 20 AND l.path_us >= 0.5 * w.window_us
),
ops AS (
    SELECT name, sum(self_us) AS path_us FROM _adv_events AS e
    SEMI JOIN bound AS b USING (run_id, rank, step)
    WHERE e.kind IN ('op', 'runtime')
    GROUP BY name ORDER BY path_us DESC, name LIMIT 5
)
SELECT 'launch_bound' AS rule,
       'The GPU waits for the CPU to launch short kernels' AS title,
       'Cut the CPU''s per-kernel overhead: capture the step in a CUDA graph (torch.cuda.graphs, '
           || 'torch.compile(mode="reduce-overhead")) or fuse the small ops (torch.compile)' AS fix,
       (SELECT sum(path_us) FROM bound) AS path_us, (SELECT count(*) FROM bound) AS windows,
       (SELECT list(DISTINCT rank ORDER BY rank) FROM bound) AS ranks,
       (SELECT sum(kernels) FROM bound)::BIGINT AS occurrences,
       list(name ORDER BY path_us DESC, name) AS top_events,
       ['*', '*Launch*'] AS scale_names, ['cpu_op', 'cuda_runtime'] AS scale_categories,
       [0.0, 0.0] AS scale_factors, ['', ''] AS scale_ranks,
       NULL::DOUBLE AS bandwidth_scale, false AS drop_syncs, NULL::VARCHAR AS not_replayable,
       (SELECT round(median(kernels)) || ' kernels a step, median ' || round(median(median_kernel_us), 1)
               || ' us; path_us is the CPU launch nodes'' time on the path' FROM bound) AS detail
FROM ops
HAVING (SELECT count(*) FROM bound) > 0;
