-- reads: _adv_events, traces, events
-- makes: rows(rule, title, fix, path_us, windows, ranks, occurrences, top_events, scale_names,
--             scale_categories, scale_factors, scale_ranks, bandwidth_scale, drop_syncs,
--             not_replayable, detail)
-- param: run_id INTEGER
-- rule: exposed_comm. Collectives on the critical path: communication that no compute hides.
-- Its row is a finding (warehouse/advice/advise.py FINDING_COLUMNS), or there is none.
-- Scenario: --comm-bandwidth-scale 2 (every collective's transfer twice as fast); not replayed
-- for one rank of a gloo job, whose transfers move only with their peers in the replay.
WITH comm AS (
    SELECT run_id, rank, step, name, inclusive_us AS path_us
    FROM _adv_events
    WHERE regexp_matches(name, '(?i)^(nccl|gloo:|c10d::|record_param_comms)')
),
names AS (
    SELECT name, sum(path_us) AS path_us FROM comm GROUP BY name ORDER BY path_us DESC, name LIMIT 5
)
SELECT 'exposed_comm' AS rule,
       'Communication is exposed on the critical path' AS title,
       'Overlap communication with compute: DDP with smaller buckets (bucket_cap_mb) so all-reduces start during '
           || 'backward, FSDP with forward/backward prefetch, no sync on gradients before the optimizer; or a faster '
           || 'interconnect (the saving shown is for a network twice as fast)' AS fix,
       (SELECT sum(path_us) FROM comm) AS path_us, (SELECT count(DISTINCT (rank, step)) FROM comm) AS windows,
       (SELECT list(DISTINCT rank ORDER BY rank) FROM comm) AS ranks, (SELECT count(*) FROM comm) AS occurrences,
       list(name ORDER BY path_us DESC, name) AS top_events,
       []::VARCHAR[] AS scale_names, []::VARCHAR[] AS scale_categories, []::DOUBLE[] AS scale_factors,
       []::VARCHAR[] AS scale_ranks, 2.0 AS bandwidth_scale, false AS drop_syncs,
       CASE WHEN (SELECT count(DISTINCT rank) FROM traces WHERE run_id = $run_id) = 1
                 AND NOT EXISTS (SELECT 1 FROM events WHERE run_id = $run_id AND cat IN ('kernel', 'Kernel')
                                 AND name ILIKE 'nccl%')
            THEN 'the run holds one rank of the job: its gloo collectives keep their measured time without '
                 || 'their peers in the replay (ingest every rank of the job together)' END AS not_replayable,
       NULL::VARCHAR AS detail
FROM names
HAVING count(*) > 0;
