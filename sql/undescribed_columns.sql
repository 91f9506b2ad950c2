-- Columns of the public tables ($1: their names) without a COMMENT; the table itself counts
-- as column '' when it has none.
SELECT table_name, column_name
FROM duckdb_columns()
WHERE table_name IN (SELECT unnest($1::VARCHAR[])) AND schema_name = 'main'
  AND database_name = current_database() AND comment IS NULL
UNION ALL
SELECT table_name, ''
FROM duckdb_tables()
WHERE table_name IN (SELECT unnest($1::VARCHAR[])) AND schema_name = 'main'
  AND database_name = current_database() AND comment IS NULL
ORDER BY 1, 2;
