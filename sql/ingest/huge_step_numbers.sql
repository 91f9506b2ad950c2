-- registered: events
-- makes: rows(event_id, name)
-- ProfilerStep#N annotations whose N is too large for steps.step (BIGINT), from one file's
-- typed events: ingest refuses the file instead of treating it as a trace without steps.
SELECT event_id, name
FROM events
WHERE name LIKE 'ProfilerStep#%'
  AND regexp_full_match(name, 'ProfilerStep#\d+')
  AND TRY_CAST(regexp_extract(name, '^ProfilerStep#(\d+)$', 1) AS BIGINT) IS NULL
ORDER BY event_id
LIMIT 1;
