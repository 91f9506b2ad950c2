-- .schema TABLE: its columns in order.
SELECT column_name AS column, data_type AS type, is_nullable AS nullable
FROM information_schema.columns
WHERE table_name = ? AND table_schema = 'main'
ORDER BY ordinal_position;
