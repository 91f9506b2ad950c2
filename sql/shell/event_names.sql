-- Completion: the most frequent event names starting with a prefix (case-insensitive).
-- GROUP BY over the filtered rows stays fast on millions of events; the shell caches it.
SELECT name
FROM events
WHERE name ILIKE ? ESCAPE '\'
GROUP BY name
ORDER BY count(*) DESC, name
LIMIT 50;
