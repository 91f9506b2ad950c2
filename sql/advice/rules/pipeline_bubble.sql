-- reads: _adv_late_finding
-- makes: rows(rule, title, fix, path_us, windows, ranks, occurrences, top_events, scale_names,
--             scale_categories, scale_factors, scale_ranks, bandwidth_scale, drop_syncs,
--             not_replayable, detail)
-- rule: pipeline_bubble. Pipeline stages wait in their point-to-point receives and sends on
-- the slowest stage: the waits (collective_instances.wait_us of send/recv) and the region on
-- that stage's path that exceeds the other stages'.
-- Its row is a finding (warehouse/advice/advise.py FINDING_COLUMNS), or there is none.
SELECT 'pipeline_bubble' AS rule,
       'Pipeline bubbles: the stages wait on stage ' || l.rank AS title,
       'Balance the pipeline stages (move layers off stage ' || l.rank || ', where ' || coalesce(l.region, 'its work') || ' makes it late), and hide the rest of the bubble with more microbatches or an interleaved schedule (ScheduleInterleaved1F1B)' AS fix,
       l.path_us, l.windows, l.ranks, l.occurrences, l.top_events, l.scale_names, l.scale_categories,
       l.scale_factors, l.scale_ranks, l.bandwidth_scale, l.drop_syncs, l.not_replayable, l.detail
FROM _adv_late_finding AS l
WHERE l.p2p;
