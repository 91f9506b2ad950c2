-- reads: collective_instances, _adv_windows, _adv_annotations, _adv_events
-- makes: _adv_late_ranks(run_id, rank, waited_us, windows, instances, last_share, p2p, region,
--                        region_category, region_us, others_us, region_factor)
-- makes: _adv_late_finding(rank, region, p2p, path_us, windows, ranks, occurrences, top_events,
--                          scale_names, scale_categories, scale_factors, scale_ranks,
--                          bandwidth_scale, drop_syncs, not_replayable, detail)
-- param: run_id INTEGER
-- param: step BIGINT    NULL: every step
-- The rank the others wait for, and the region on its path that made it late (for the
-- straggler and pipeline_bubble rules).
-- _adv_late_ranks: one row at most: the rank whose lateness the others waited longest for
--     (waited_us, over the steps in scope), the share of matched calls it was last to, whether
--     the waits were point-to-point (a pipeline), and its region whose path time per step most
--     exceeds the other ranks' mean (region_factor: the share of it the others need).
-- _adv_late_finding: the finding columns the straggler and pipeline_bubble rules share
--     (warehouse/advice/advise.py FINDING_COLUMNS but rule, title and fix), with rank, region
--     and p2p to tell the two apart. Scenario: the late rank's excess region takes the time it
--     takes on the other ranks (region_factor); without such a region the saving is not replayed.

CREATE OR REPLACE TEMP TABLE _adv_late_ranks AS
WITH calls AS (
    SELECT * FROM collective_instances
    WHERE run_id = $run_id AND matched AND ($step IS NULL OR step = $step)
),
caused AS (
    SELECT last_rank AS rank, sum(wait_us) AS waited_us, count(DISTINCT step) AS windows,
           bool_or(name IN ('send', 'recv', 'isend', 'irecv')) AS p2p
    FROM calls
    WHERE rank <> last_rank AND wait_us > 0
    GROUP BY last_rank
),
late AS (
    SELECT c.*, (SELECT count(DISTINCT (pg, seq)) FROM calls AS k WHERE k.last_rank = c.rank) AS instances,
           (SELECT count(DISTINCT (pg, seq)) FROM calls AS k WHERE k.last_rank = c.rank)
               / (SELECT count(DISTINCT (pg, seq)) FROM calls) AS last_share
    FROM caused AS c
    ORDER BY waited_us DESC, rank
    LIMIT 1
),
regions AS (
    SELECT rank, name, 'user_annotation' AS category, sum(path_us) AS path_us FROM _adv_annotations GROUP BY ALL
    UNION ALL
    SELECT rank, name, cat, sum(self_us) FROM _adv_events WHERE kind IN ('op', 'python') GROUP BY ALL
),
steps AS (
    SELECT count(DISTINCT step) AS steps, count(DISTINCT rank) AS ranks FROM _adv_windows
),
excess AS (
    SELECT r.name, r.category,
           sum(r.path_us) FILTER (WHERE r.rank = l.rank) / any_value(s.steps) AS region_us,
           coalesce(sum(r.path_us) FILTER (WHERE r.rank <> l.rank), 0) / any_value(s.steps)
               / greatest(any_value(s.ranks) - 1, 1) AS others_us
    FROM regions AS r, late AS l, steps AS s
    GROUP BY ALL
    HAVING sum(r.path_us) FILTER (WHERE r.rank = l.rank) > 0
    ORDER BY region_us - others_us DESC, r.name
    LIMIT 1
)
SELECT $run_id AS run_id, l.rank, l.waited_us, l.windows, l.instances, l.last_share, l.p2p,
       x.name AS region, x.category AS region_category, x.region_us, x.others_us,
       least(1.0, x.others_us / x.region_us) AS region_factor
FROM late AS l
LEFT JOIN excess AS x ON true;

CREATE OR REPLACE TEMP TABLE _adv_late_finding AS
SELECT l.rank, l.region, l.p2p,
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
FROM _adv_late_ranks AS l;
