-- reads: _adv_path_events, _adv_path_annotations
-- makes: _adv_region_paths(method, kind, label, category, rank_scope, rank, step, path_us)
-- makes: _adv_region_windows(kind, label, category, rank_scope, rank, step, path_us)
-- makes: _adv_region_job_steps(kind, label, rank_scope, step, path_us)
-- makes: _adv_profile_regions(place, kind, label, category, rank, path_us, windows)
-- param: top INTEGER
-- The causal profile's regions: the largest regions on the ctda path, and each one's path time
-- in every analysed window (the side of the profile that the replay's savings are set against).
-- _adv_region_paths: a region's counted path time in one window of a rank, on the rank's ctda
--     path or (method cross_rank) on the job's cross-rank path of the step; rank_scope is set
--     for a rank's collectives (that rank's calls of that name), NULL for a region of every rank.
-- _adv_region_windows: the ctda rows, per rank and window.
-- _adv_region_job_steps: the cross-rank rows, per step of the job, over the ranks its path
--     crosses (the path time a replay of the job's step at zero is set against).
-- _adv_profile_regions: the `top` largest, at most greatest(3, ceil(top / 4)) of each kind,
--     largest first: path_us is the region's path time per window that holds it (its total over
--     the windows that hold it).

CREATE OR REPLACE TEMP TABLE _adv_region_paths AS
SELECT method, 'annotation' AS kind, name AS label, 'user_annotation' AS category, NULL::INTEGER AS rank_scope,
       rank, step, sum(path_us) AS path_us
FROM _adv_path_annotations
GROUP BY method, name, rank, step
UNION ALL
-- an op is removed with what runs inside it: its inclusive time on the path
SELECT method, 'op', name, any_value(cat), NULL, rank, step, sum(inclusive_us)
FROM _adv_path_events
WHERE kind = 'op' AND NOT regexp_matches(name, '^(nccl:|gloo:|c10d|record_param_comms)')
GROUP BY method, name, rank, step
UNION ALL
SELECT method, 'kernel', name, any_value(cat), NULL, rank, step, sum(self_us)
FROM _adv_path_events
WHERE kind = 'kernel' AND NOT regexp_matches(name, '(?i)^nccl')
GROUP BY method, name, rank, step
UNION ALL
SELECT method, 'collective', name, any_value(cat), rank, rank, step, sum(inclusive_us)
FROM _adv_path_events
WHERE regexp_matches(name, '(?i)^(nccl|gloo:|c10d::|record_param_comms)')
GROUP BY method, name, rank, step;

CREATE OR REPLACE TEMP TABLE _adv_region_windows AS
SELECT kind, label, category, rank_scope, rank, step, path_us FROM _adv_region_paths WHERE method = 'ctda';

CREATE OR REPLACE TEMP TABLE _adv_region_job_steps AS
SELECT kind, label, rank_scope, step, sum(path_us) AS path_us
FROM _adv_region_paths
WHERE method = 'cross_rank'
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE _adv_profile_regions AS
WITH candidates AS (
    -- the category of a name is the same in every window up to its spelling: keep one
    SELECT kind, label, any_value(category) AS category, rank_scope AS rank,
           sum(path_us) AS path_us, count(*) AS windows
    FROM _adv_region_windows
    GROUP BY kind, label, rank_scope
),
ranked AS (
    SELECT kind, label, category, rank, path_us / windows AS path_us, windows,
           row_number() OVER (PARTITION BY kind ORDER BY path_us / windows DESC, label) AS place_in_kind
    FROM candidates
    WHERE path_us > 0
)
SELECT row_number() OVER (ORDER BY path_us DESC, kind, label, rank) AS place,
       kind, label, category, rank, path_us, windows
FROM ranked
WHERE place_in_kind <= greatest(3, ceil($top / 4))
ORDER BY path_us DESC, kind, label, rank
LIMIT $top;
