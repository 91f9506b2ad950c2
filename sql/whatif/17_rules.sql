-- makes: wi_rules(seq, name_glob, cat_glob, factor, ranks)
-- param: rule_names VARCHAR[]
-- param: rule_categories VARCHAR[]
-- param: rule_factors DOUBLE[]
-- param: rule_ranks VARCHAR[]
-- The scenario's --scale rules: glob on event names, optional glob on the category, optional
-- ranks ('' for every rank, else a comma-separated list).
CREATE OR REPLACE TEMP TABLE wi_rules AS
SELECT seq, name_glob, cat_glob, factor,
       CASE WHEN rank_list = '' THEN NULL ELSE CAST(string_split(rank_list, ',') AS INTEGER[]) END AS ranks
FROM (
    SELECT unnest(range(len(CAST($rule_names AS VARCHAR[])))) AS seq,
           unnest(CAST($rule_names AS VARCHAR[])) AS name_glob,
           unnest(CAST($rule_categories AS VARCHAR[])) AS cat_glob,
           unnest(CAST($rule_factors AS DOUBLE[])) AS factor,
           unnest(CAST($rule_ranks AS VARCHAR[])) AS rank_list
);
