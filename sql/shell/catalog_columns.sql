-- Completion: every table and view with its columns (temporary ones included).
SELECT table_name, column_name
FROM information_schema.columns
WHERE table_schema IN ('main', 'temp')
ORDER BY table_name, ordinal_position;
