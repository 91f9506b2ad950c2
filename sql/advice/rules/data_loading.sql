-- reads: _adv_annotations, _adv_events, _adv_windows
-- makes: rows(rule, title, fix, path_us, windows, ranks, occurrences, top_events, scale_names,
--             scale_categories, scale_factors, scale_ranks, bandwidth_scale, drop_syncs,
--             not_replayable, detail)
-- rule: data_loading. The step waits for its next batch: data-loading annotations (`data_loading`,
-- `enumerate(DataLoader)#...`) and the DataLoader's own ops and Python frames on the path.
-- Its row is a finding (the columns of warehouse/advice/advise.py FINDING_COLUMNS), or there is none.
-- Scenario: the matched regions take no time (loading overlapped with the step by workers).
WITH annotated AS (
    SELECT run_id, rank, step, name, 'user_annotation' AS category, path_us, occurrences
    FROM _adv_annotations
    WHERE regexp_matches(name, '(?i)data_?load|dataloader|_next_data|next_batch|load_batch|fetch_batch')
),
framed AS (
    SELECT run_id, rank, step, name, cat AS category, sum(self_us) AS path_us, count(*) AS occurrences
    FROM _adv_events
    WHERE kind IN ('op', 'python') AND regexp_matches(name, '(?i)dataloader|_next_data|__next__|collate_fn|default_collate')
    GROUP BY ALL
),
per_window AS (
    -- annotations enclose the frames inside them: take the larger of the two, never both
    SELECT w.run_id, w.rank, w.step,
           least(greatest(coalesce((SELECT sum(path_us) FROM annotated AS a WHERE (a.run_id, a.rank, a.step) = (w.run_id, w.rank, w.step)), 0),
                          coalesce((SELECT sum(path_us) FROM framed AS f WHERE (f.run_id, f.rank, f.step) = (w.run_id, w.rank, w.step)), 0)),
                 w.window_us) AS path_us
    FROM _adv_windows AS w
),
regions AS (
    SELECT name, category, sum(path_us) AS path_us, sum(occurrences) AS occurrences
    FROM (SELECT * FROM annotated UNION ALL SELECT * FROM framed)
    GROUP BY ALL
    ORDER BY path_us DESC, name
    LIMIT 5
)
SELECT 'data_loading' AS rule,
       'Data loading is on the critical path' AS title,
       'Load batches in the background: DataLoader(num_workers=N, pin_memory=True, persistent_workers=True, '
           || 'prefetch_factor=2), and move decoding and augmentation out of the training loop' AS fix,
       (SELECT sum(path_us) FROM per_window) AS path_us,
       (SELECT count(*) FROM per_window WHERE path_us > 0) AS windows,
       (SELECT list(DISTINCT rank ORDER BY rank) FROM per_window WHERE path_us > 0) AS ranks,
       (SELECT sum(occurrences) FROM regions)::BIGINT AS occurrences,
       list(name ORDER BY path_us DESC, name) AS top_events,
       list(name ORDER BY path_us DESC, name) AS scale_names,
       list(category ORDER BY path_us DESC, name) AS scale_categories,
       list(0.0 ORDER BY path_us DESC, name) AS scale_factors,
       list('' ORDER BY path_us DESC, name) AS scale_ranks,
       NULL::DOUBLE AS bandwidth_scale, false AS drop_syncs, NULL::VARCHAR AS not_replayable,
       NULL::VARCHAR AS detail
FROM regions
HAVING count(*) > 0;
