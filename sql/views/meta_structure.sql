-- The JSON structure of every runs.meta object merged: {"key": "TYPE", ...}.
SELECT coalesce(json_group_structure(meta), '{}') FROM runs;
