-- The run's stored causal profile (advice_profile, from its last `ctda-sql advise`).
-- reads:  advice_profile
-- param:  run_id INTEGER
SELECT place, kind, label, rank, path_us, coalesce(saving_at_half_us, 0) AS saving_at_half_us,
       coalesce(saving_at_zero_us, 0) AS saving_at_zero_us
FROM advice_profile
WHERE run_id = $run_id
ORDER BY place;
