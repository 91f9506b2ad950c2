-- The run's stored advice (advice_findings, from its last `ctda-sql advise`), best first.
-- reads:  advice_findings
-- param:  run_id INTEGER
SELECT place, rule, title, fix, evidence, scenario, saving_us, saving_share
FROM advice_findings
WHERE run_id = $run_id
ORDER BY place;
