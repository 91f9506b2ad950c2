-- name: advice
-- description: what to fix first and what it buys: the findings of the run's last `ctda-sql advise`, ranked by the saving the replay predicts
-- key: place, rule, saving_us
-- param: run VARCHAR = NULL        run name; all runs when NULL
-- param: top INTEGER = 10          rows to keep
SELECT r.name AS run, a.place, a.rule, a.saving_us, a.saving_share, a.path_us, a.fix, a.scenario, a.evidence
FROM advice_findings AS a
JOIN runs AS r USING (run_id)
WHERE $run IS NULL OR r.name = $run
ORDER BY r.name, a.place
LIMIT $top;
