-- The biggest changes on the predicted path of each what-if scenario of a run: per node label,
-- the measured against the predicted time of the nodes on the predicted path (whatif_path),
-- summed over the scenario's steps; the $top largest changes per scenario. Both sides are the
-- same nodes: a node that did not change shows none, however the path moved (a multi-rank
-- path runs into the rank that held a collective; the measured ctda path stays on its rank).
-- Parameters: run_id, top.
WITH scenario_steps AS (
    SELECT DISTINCT scenario, run_id, rank, step FROM whatif_steps WHERE run_id = $run_id
),
changes AS (
    SELECT p.scenario, coalesce(p.label, p.kind) AS label, sum(p.measured_us) AS measured_us,
           sum(p.predicted_us) AS predicted_us, sum(p.predicted_us) - sum(p.measured_us) AS change_us
    FROM whatif_path AS p
    JOIN scenario_steps AS s USING (scenario, run_id, rank, step)
    GROUP BY ALL
)
SELECT * FROM changes
-- below the reports' 0.1 µs is rounding, not a change
WHERE abs(change_us) >= 0.05
QUALIFY row_number() OVER (PARTITION BY scenario ORDER BY abs(change_us) DESC, label) <= $top
ORDER BY scenario, abs(change_us) DESC, label;
