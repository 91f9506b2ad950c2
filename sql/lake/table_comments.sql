-- makes: rows(table_name, column_name, comment)
-- param: tables VARCHAR[]
-- The descriptions (COMMENT ON) of the warehouse tables that a lake's views replace, so the
-- views can carry them (warehouse/lake/views.py, attach_views): (table, '' for the table itself or
-- the column, comment). The tables got them from the schema files (core/column_docs.py).
-- Parameter: tables.
SELECT table_name, '' AS column_name, comment
FROM duckdb_tables()
WHERE schema_name = 'main' AND database_name = current_database() AND comment IS NOT NULL
  AND list_contains($tables, table_name)
UNION ALL
SELECT table_name, column_name, comment
FROM duckdb_columns()
WHERE schema_name = 'main' AND database_name = current_database() AND comment IS NOT NULL
  AND list_contains($tables, table_name);
