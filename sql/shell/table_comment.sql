-- .schema TABLE: the table's description (COMMENT ON), when it has one; a lake's tables are
-- views (warehouse/lake/store.py gives them their tables' descriptions).
SELECT comment FROM (
    SELECT database_name, table_name AS name, schema_name, comment FROM duckdb_tables()
    UNION ALL
    SELECT database_name, view_name, schema_name, comment FROM duckdb_views()
)
WHERE name = ? AND schema_name = 'main' AND comment IS NOT NULL
ORDER BY database_name = current_database() DESC
LIMIT 1;
