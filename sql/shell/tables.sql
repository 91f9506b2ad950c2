-- .tables: the warehouse's tables and views (the shell's own and DuckDB's internals left out).
SELECT table_name AS name, lower(replace(table_type, 'BASE ', '')) AS type
FROM information_schema.tables
WHERE table_schema = 'main' AND table_catalog = current_database()
ORDER BY type, name;
