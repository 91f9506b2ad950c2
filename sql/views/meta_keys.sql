-- Every key used in runs.meta (the --meta keys of all runs), in the order first stored.
SELECT key
FROM runs, unnest(json_keys(meta)) AS keys(key)
GROUP BY key
ORDER BY min(run_id), key;
