-- Every attribute of a run as (key, value) rows: experiments columns, --meta pairs and the
-- trace's world size. Reports pick one attribute by a bound key instead of a pasted column.
CREATE OR REPLACE VIEW run_attributes AS
WITH sources AS (
    SELECT run_id, name AS run, 'meta' AS source, meta::JSON AS attrs
    FROM runs
    UNION ALL
    SELECT r.run_id, r.name, 'experiments', to_json(e)
    FROM experiments AS e
    JOIN runs AS r ON r.name = e.run
    UNION ALL
    SELECT t.run_id, r.name, 'traces', json_object('world_size', max(t.world_size))
    FROM traces AS t
    JOIN runs AS r USING (run_id)
    GROUP BY t.run_id, r.name
)
-- json_each, not `attrs ->> key`: a key such as '*' or '$.x' would be read as a JSON path
SELECT run_id, run, source, pair.key, pair.value ->> '$' AS value
FROM sources, json_each(attrs) AS pair
WHERE pair.key <> 'run';
