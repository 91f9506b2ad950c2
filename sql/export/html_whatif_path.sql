-- The biggest changes on the predicted path of each what-if scenario of a run: per node label,
-- time on the measured ctda path (critical_path, counted) against time on the predicted path
-- (whatif_path), summed over the scenario's steps; the $top largest changes per scenario.
-- Parameters: run_id, top.
WITH scenario_steps AS (
    SELECT DISTINCT scenario, run_id, rank, step FROM whatif_steps WHERE run_id = $run_id
),
measured AS (
    SELECT s.scenario, coalesce(n.label, n.kind) AS label, sum(c.counted_us) AS measured_us
    FROM scenario_steps AS s
    JOIN critical_path AS c ON c.run_id = s.run_id AND c.rank = s.rank AND c.step = s.step AND c.method = 'ctda'
    JOIN nodes AS n
        ON n.run_id = c.run_id AND n.rank = c.rank AND n.step = c.step AND n.method = c.method
       AND n.node_id = c.node_id
    GROUP BY ALL
),
predicted AS (
    SELECT p.scenario, coalesce(p.label, p.kind) AS label, sum(p.predicted_us) AS predicted_us
    FROM whatif_path AS p
    JOIN scenario_steps AS s USING (scenario, run_id, rank, step)
    GROUP BY ALL
),
changes AS (
    SELECT scenario, label, coalesce(m.measured_us, 0.0) AS measured_us, coalesce(p.predicted_us, 0.0) AS predicted_us,
           coalesce(p.predicted_us, 0.0) - coalesce(m.measured_us, 0.0) AS change_us
    FROM measured AS m
    FULL JOIN predicted AS p USING (scenario, label)
)
SELECT * FROM changes
WHERE abs(change_us) > 0
QUALIFY row_number() OVER (PARTITION BY scenario ORDER BY abs(change_us) DESC, label) <= $top
ORDER BY scenario, abs(change_us) DESC, label;
