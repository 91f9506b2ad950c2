-- name: hotspots_by_experiment
-- description: critical-path time per training phase for each value of an experiment column, across runs (e.g. the share of communication by world_size)
-- param: by VARCHAR = world_size  experiment column: from `meta load`, an ingest --meta key, or world_size
-- param: method VARCHAR = ctda  analysis method: ctda or per_thread
-- param: top INTEGER = 10  phases kept per value
-- key: value, phase, share_of_path
WITH known_columns AS (
    SELECT DISTINCT key FROM run_attributes
),
checked AS (
    -- $by is bound and only compared with known names; an unknown one is an error
    SELECT CASE
        WHEN $by NOT IN (SELECT key FROM known_columns) THEN error(
            'unknown experiment column ' || $by || '; known: '
            || coalesce((SELECT string_agg(key, ', ' ORDER BY key) FROM known_columns), 'none'))
    END AS problem
),
run_values AS (
    -- experiments rows win over --meta pairs, which win over the trace's world size
    SELECT run_id, arg_min(value, CASE source WHEN 'experiments' THEN 1 WHEN 'meta' THEN 2 ELSE 3 END) AS value
    FROM run_attributes
    WHERE key = $by
    GROUP BY run_id
),
path AS (
    SELECT cp.run_id, coalesce(n.phase, 'Other') AS phase, cp.counted_us
    FROM critical_path AS cp
    JOIN nodes AS n USING (run_id, rank, step, method, node_id)
    WHERE cp.method = $method
),
by_phase AS (
    SELECT v.value, p.phase, count(DISTINCT p.run_id) AS runs, sum(p.counted_us) AS path_us
    FROM path AS p
    JOIN run_values AS v USING (run_id)
    GROUP BY v.value, p.phase
),
ranked AS (
    SELECT
        value,
        phase,
        runs,
        path_us,
        path_us / sum(path_us) OVER (PARTITION BY value) AS share_of_path,
        rank() OVER (PARTITION BY value ORDER BY path_us DESC) AS phase_rank
    FROM by_phase
)
SELECT $by AS experiment_column, value, phase, runs, path_us, share_of_path, phase_rank
FROM ranked, checked
WHERE phase_rank <= $top AND checked.problem IS NULL
ORDER BY TRY_CAST(value AS DOUBLE) NULLS LAST, value, phase_rank;
