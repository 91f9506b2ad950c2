-- The scenario's --scale rules: glob on event names, optional glob on the category.
CREATE OR REPLACE TEMP TABLE wi_rules AS
SELECT unnest(range(len(CAST($rule_names AS VARCHAR[])))) AS seq,
       unnest(CAST($rule_names AS VARCHAR[])) AS name_glob,
       unnest(CAST($rule_categories AS VARCHAR[])) AS cat_glob,
       unnest(CAST($rule_factors AS DOUBLE[])) AS factor;
