-- The causal profile's regions: the largest regions on the ctda path, at most three of each kind.
-- reads:  _adv_annotations, _adv_events (10_path_regions.sql)
-- makes:  rows (kind, label, category, rank, path_us, windows), largest first: path_us is the
--         region's path time per step where it occurs (its total over the windows that hold it);
--         `rank` is set for a rank's collectives (that rank's calls of that name), NULL elsewhere
-- param:  top INTEGER   how many regions
WITH candidates AS (
    SELECT 'annotation' AS kind, name AS label, 'user_annotation' AS category, NULL::INTEGER AS rank,
           sum(path_us) AS path_us, count(DISTINCT (rank, step)) AS windows
    FROM _adv_annotations
    GROUP BY name
    UNION ALL
    -- an op is removed with what runs inside it: its inclusive time on the path
    SELECT 'op', name, any_value(cat), NULL, sum(inclusive_us), count(DISTINCT (rank, step))
    FROM _adv_events
    WHERE kind = 'op' AND NOT regexp_matches(name, '^(nccl:|gloo:|c10d|record_param_comms)')
    GROUP BY name
    UNION ALL
    SELECT 'kernel', name, any_value(cat), NULL, sum(self_us), count(DISTINCT (rank, step))
    FROM _adv_events
    WHERE kind = 'kernel' AND NOT regexp_matches(name, '(?i)^nccl')
    GROUP BY name
    UNION ALL
    SELECT 'collective', name, any_value(cat), rank, sum(inclusive_us), count(DISTINCT (rank, step))
    FROM _adv_events
    WHERE regexp_matches(name, '(?i)^(nccl|gloo:|c10d::|record_param_comms)')
    GROUP BY name, rank
),
ranked AS (
    SELECT kind, label, category, rank, path_us / windows AS path_us, windows,
           row_number() OVER (PARTITION BY kind ORDER BY path_us / windows DESC, label) AS place_in_kind
    FROM candidates
    WHERE path_us > 0
)
SELECT kind, label, category, rank, path_us, windows
FROM ranked
WHERE place_in_kind <= 3
ORDER BY path_us DESC, kind, label
LIMIT $top;
