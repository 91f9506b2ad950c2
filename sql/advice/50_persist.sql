-- registered: _adv_result_findings, _adv_result_profile (warehouse/advice/advise.py)
-- writes: advice_findings, advice_profile
-- param: run_id INTEGER
-- Store a run's advice, replacing its earlier rows.
DELETE FROM advice_findings WHERE run_id = $run_id;
DELETE FROM advice_profile WHERE run_id = $run_id;
INSERT INTO advice_findings
SELECT $run_id, place, rule, title, fix, evidence, scenario, saving_us, saving_share, path_us, steps, ranks
FROM _adv_result_findings;
INSERT INTO advice_profile
SELECT $run_id, place, kind, label, rank, path_us, saving_at_half_us, saving_at_zero_us, note, per_step
FROM _adv_result_profile;
