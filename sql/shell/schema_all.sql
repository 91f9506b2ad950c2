-- .schema: the CREATE statement of every table and view.
SELECT table_name AS name, sql
FROM duckdb_tables()
WHERE database_name = current_database() AND schema_name = 'main'
UNION ALL
SELECT view_name, sql
FROM duckdb_views()
WHERE NOT internal AND database_name = current_database() AND schema_name = 'main'
ORDER BY name;
