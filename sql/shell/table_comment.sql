-- .schema TABLE: the table's description (COMMENT ON), when it has one.
SELECT comment FROM duckdb_tables()
WHERE table_name = ? AND schema_name = 'main' AND comment IS NOT NULL
ORDER BY database_name = current_database() DESC
LIMIT 1;
