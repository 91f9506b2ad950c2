-- rule: pipeline_bubble. Pipeline stages wait in their point-to-point receives and sends on
-- the slowest stage: the waits (collective_instances.wait_us of send/recv) and the region on
-- that stage's path that exceeds the other stages'.
-- reads:  _adv_late_ranks (30_late_ranks.sql)
-- makes:  one finding row (warehouse/advice/advise.py FINDING_COLUMNS), or none
-- Scenario: the late rank's excess region takes the time it takes on the other ranks
-- (region_factor); without such a region the saving is not replayed.
SELECT 'pipeline_bubble' AS rule,
       'Pipeline bubbles: the stages wait on stage ' || l.rank AS title,
       'Balance the pipeline stages (move layers off stage ' || l.rank || ', where ' || coalesce(l.region, 'its work') || ' makes it late), and hide the rest of the bubble with more microbatches or an interleaved schedule (ScheduleInterleaved1F1B)' AS fix,
       coalesce(l.region_us * l.windows, l.waited_us) AS path_us, l.windows, [l.rank] AS ranks, l.instances AS occurrences,
       CASE WHEN l.region IS NULL THEN []::VARCHAR[] ELSE [l.region] END AS top_events,
       [coalesce(l.region, '')] AS scale_names, [l.region_category] AS scale_categories,
       [coalesce(l.region_factor, 1.0)] AS scale_factors, [CAST(l.rank AS VARCHAR)] AS scale_ranks,
       NULL::DOUBLE AS bandwidth_scale, false AS drop_syncs,
       CASE WHEN l.region IS NULL OR l.region_us - l.others_us < 0.25 * l.waited_us / l.windows
            THEN 'no region on rank ' || l.rank || '''s path accounts for the others'' wait' END AS not_replayable,
       'the other ranks waited ' || round(l.waited_us / 1000 / l.windows, 2) || ' ms a step for rank ' || l.rank
           || ', last to ' || round(100 * l.last_share) || '% of the matched calls'
           || coalesce('; ' || l.region || ' takes ' || round(l.region_us / 1000, 2) || ' ms a step on it, '
                       || round(l.others_us / 1000, 2) || ' ms on the others', '') AS detail
FROM _adv_late_ranks AS l
WHERE l.p2p;
