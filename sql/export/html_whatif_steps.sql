-- What-if scenarios of a run (whatif_steps): measured and predicted step time per scenario,
-- as means over the scenario's steps and ranks; the ranks it reported and the run's ranks, so
-- the page can name a scenario by its arguments (--rank R when it reported one rank of
-- several; warehouse/export/html.py). Parameters: run_id.
SELECT scenario, any_value(changes) AS changes, count(*) AS steps,
       avg(measured_us) AS measured_us, avg(replay_us) AS replay_us, avg(predicted_us) AS predicted_us,
       avg(replay_us) / nullif(avg(predicted_us), 0) AS speedup,
       list(DISTINCT rank ORDER BY rank) AS ranks,
       (SELECT count(*) FROM traces WHERE run_id = $run_id) AS run_ranks
FROM whatif_steps
WHERE run_id = $run_id
GROUP BY scenario
ORDER BY min(rowid);
