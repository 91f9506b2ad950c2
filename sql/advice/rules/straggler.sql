-- reads: _adv_late_finding
-- makes: rows(rule, title, fix, path_us, windows, ranks, occurrences, top_events, scale_names,
--             scale_categories, scale_factors, scale_ranks, bandwidth_scale, drop_syncs,
--             not_replayable, detail)
-- rule: straggler. A rank the others wait for in their collectives: the other ranks' waits
-- for it (collective_instances.wait_us where it arrived last) and the region on its path that
-- exceeds the other ranks' (cross_rank_hotspots shows it on the cross-rank path).
-- Its row is a finding (warehouse/advice/advise.py FINDING_COLUMNS), or there is none.
SELECT 'straggler' AS rule,
       'Rank ' || l.rank || ' is late: the other ranks wait for it in their collectives' AS title,
       'Make rank ' || l.rank || ' do what the others do: balance its share of the data or work, and look for what only it runs (' || coalesce(l.region, 'see the cross-rank path') || '), e.g. a slow disk, a noisy neighbour, extra logging or checkpointing' AS fix,
       l.path_us, l.windows, l.ranks, l.occurrences, l.top_events, l.scale_names, l.scale_categories,
       l.scale_factors, l.scale_ranks, l.bandwidth_scale, l.drop_syncs, l.not_replayable, l.detail
FROM _adv_late_finding AS l
WHERE NOT l.p2p;
