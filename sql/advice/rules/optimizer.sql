-- reads: _adv_annotations, events
-- makes: rows(rule, title, fix, path_us, windows, ranks, occurrences, top_events, scale_names,
--             scale_categories, scale_factors, scale_ranks, bandwidth_scale, drop_syncs,
--             not_replayable, detail)
-- param: run_id INTEGER
-- rule: optimizer. The optimizer's step on the critical path, run tensor by tensor (no
-- `_foreach_` or fused kernels inside it).
-- Its row is a finding (warehouse/advice/advise.py FINDING_COLUMNS), or there is none.
-- Scenario: the optimizer step (its annotation on the CPU and, on a GPU, on the stream) at 0.05
-- of its time on a GPU (a fused step replaces thousands of tiny kernels and their launches:
-- 30x measured on an H100-class GPU, tests/data/advice/foreach vs fused) and 0.25 on a CPU-only
-- run (foreach; docs/advice.md has the pairs these factors come from).
WITH steps AS (
    SELECT * FROM _adv_annotations WHERE regexp_matches(name, '^Optimizer\.step#|(?i)^## ?optimizer')
),
batched AS (
    -- the step already runs multi-tensor kernels: this fix is in place
    SELECT count(*) AS ops FROM events AS e
    JOIN events AS o ON o.run_id = e.run_id AND o.rank = e.rank AND o.pid IS NOT DISTINCT FROM e.pid AND o.tid = e.tid
        AND e.ts_us >= o.ts_us AND e.end_us <= o.end_us
    WHERE e.run_id = $run_id AND o.run_id = $run_id AND o.ph = 'X' AND regexp_matches(o.name, '^Optimizer\.step#')
      AND e.ph = 'X' AND (e.name LIKE 'aten::\_foreach\_%' ESCAPE '\' OR e.name LIKE 'aten::\_fused\_%' ESCAPE '\')
),
device AS (
    SELECT EXISTS (SELECT 1 FROM events WHERE run_id = $run_id AND cat IN ('kernel', 'Kernel')) AS on_gpu
),
names AS (
    SELECT name, sum(path_us) AS path_us, sum(occurrences) AS occurrences FROM steps GROUP BY name
    ORDER BY path_us DESC, name LIMIT 3
)
SELECT 'optimizer' AS rule,
       'The optimizer step is on the critical path, one tensor at a time' AS title,
       'Use a multi-tensor optimizer: torch.optim.AdamW(..., fused=True) on CUDA, or foreach=True; for many small '
           || 'parameters, flatten them (FSDP, or a larger bucket of parameters per group)' AS fix,
       (SELECT sum(path_us) FROM steps) AS path_us, (SELECT count(DISTINCT (rank, step)) FROM steps) AS windows,
       (SELECT list(DISTINCT rank ORDER BY rank) FROM steps) AS ranks,
       sum(occurrences)::BIGINT AS occurrences,
       list(name ORDER BY path_us DESC, name) AS top_events,
       list(name ORDER BY path_us DESC, name) AS scale_names,
       list(NULL::VARCHAR ORDER BY path_us DESC, name) AS scale_categories,
       list(CASE WHEN (SELECT on_gpu FROM device) THEN 0.05 ELSE 0.25 END ORDER BY path_us DESC, name) AS scale_factors,
       list('' ORDER BY path_us DESC, name) AS scale_ranks,
       NULL::DOUBLE AS bandwidth_scale, false AS drop_syncs, NULL::VARCHAR AS not_replayable,
       NULL::VARCHAR AS detail
FROM names
HAVING count(*) > 0 AND (SELECT ops FROM batched) = 0;
