-- .schema TABLE: its columns in order, with their descriptions (COMMENT ON).
SELECT column_name AS column, data_type AS type, is_nullable AS nullable, comment AS description
FROM duckdb_columns()
WHERE table_name = ? AND schema_name = 'main'
ORDER BY database_name = current_database() DESC, column_index;
