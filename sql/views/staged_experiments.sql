-- Merge freshly staged experiment rows over the stored ones. Columns are the union of both
-- (types widened by UNION BY NAME); per run and column the new non-NULL value wins, so a
-- file with only some columns updates those and keeps the rest.
CREATE OR REPLACE TABLE experiments AS
SELECT run, any_value(COLUMNS(* EXCLUDE (run, load_order)) ORDER BY load_order DESC)
FROM (
    SELECT *, 1 AS load_order FROM staged_experiments
    UNION ALL BY NAME
    SELECT *, 0 AS load_order FROM experiments
)
GROUP BY run
ORDER BY run;
