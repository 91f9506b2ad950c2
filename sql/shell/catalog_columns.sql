-- Completion: every table and view with its columns (temporary ones included) and their
-- descriptions (COMMENT ON), shown beside the column in the completion menu.
SELECT table_name, column_name, comment
FROM duckdb_columns()
WHERE schema_name = 'main' AND database_name IN (current_database(), 'temp')
ORDER BY table_name, column_index;
