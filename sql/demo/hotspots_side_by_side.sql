-- The top hotspots of a run (counted self time on the path, all steps), ctda beside
-- per_thread, row by row. Parameters: run_id, top.
WITH ranked AS (
    SELECT method, name, sum(self_us) AS path_us,
           row_number() OVER (PARTITION BY method ORDER BY sum(self_us) DESC, name) AS place
    FROM path_events
    WHERE run_id = $run_id
    GROUP BY method, name
    HAVING sum(self_us) > 0
)
SELECT coalesce(c.place, p.place) AS place,
       c.name AS ctda_hotspot, c.path_us AS ctda_us,
       p.name AS per_thread_hotspot, p.path_us AS per_thread_us
FROM (SELECT * FROM ranked WHERE method = 'ctda' AND place <= $top) AS c
FULL JOIN (SELECT * FROM ranked WHERE method = 'per_thread' AND place <= $top) AS p USING (place)
ORDER BY place;
