-- The events with the most counted (self) time on the path of a run, by phase of the path
-- node they ran in, for each method: the HTML report's "top hotspots per phase".
-- Parameters: run_id, top (rows per method and phase).
WITH per_name AS (
    SELECT e.method, coalesce(n.phase, n.kind) AS phase, e.name, e.cat, sum(e.self_us) AS path_us
    FROM path_events AS e
    JOIN nodes AS n USING (run_id, rank, step, method, node_id)
    WHERE e.run_id = $run_id
    GROUP BY ALL
    HAVING sum(e.self_us) > 0
),
ranked AS (
    SELECT *,
           path_us / sum(path_us) OVER (PARTITION BY method) AS share_of_path,
           sum(path_us) OVER (PARTITION BY method, phase) AS phase_us,
           row_number() OVER (PARTITION BY method, phase ORDER BY path_us DESC, name) AS place
    FROM per_name
)
SELECT method, phase, name, cat, path_us, share_of_path
FROM ranked
WHERE place <= $top
ORDER BY method, phase_us DESC, phase, path_us DESC, name;
