-- rule: straggler. A rank the others wait for in their collectives: the other ranks' waits
-- for it (collective_instances.wait_us where it arrived last) and the region on its path that
-- exceeds the other ranks' (cross_rank_hotspots shows it on the cross-rank path).
-- reads:  _adv_late_ranks (30_late_ranks.sql)
-- makes:  one finding row (warehouse/advice/advise.py FINDING_COLUMNS), or none
-- Scenario: the late rank's excess region takes the time it takes on the other ranks
-- (region_factor); without such a region the saving is not replayed.
SELECT 'straggler' AS rule,
       'Rank ' || l.rank || ' is late: the other ranks wait for it in their collectives' AS title,
       'Make rank ' || l.rank || ' do what the others do: balance its share of the data or work, and look for what only it runs (' || coalesce(l.region, 'see the cross-rank path') || '), e.g. a slow disk, a noisy neighbour, extra logging or checkpointing' AS fix,
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
WHERE NOT l.p2p;
