-- The traceEvents of an overlay trace (`ctda-sql export overlay`), one JSON text per row, in
-- the order they are written:
--   1. every input event exactly as its trace file holds it (overlay_input: the file's event
--      objects verbatim, made by export.py), HTA's convention: name, ph, ts, dur, pid, tid and
--      args are never changed. Events with counted time on the $primary path gain
--      args.critical = 1 (an event with no args gains {"critical": 1}; a non-object args is
--      left alone); with $remap (all ranks of a multi-rank run in one file) an integer flow
--      `id` moves by rank * a power of ten above the largest, so ranks' flows stay apart, and
--      each rank's `pid` takes its overlay pid (overlay_pids: sql/export/overlay_pids.sql,
--      empty without $remap), so no (pid, tid) track holds two ranks' events; a process_name
--      event's args.name becomes its track's name, 'rank R · GPU d (NAME)';
--   2. with $remap, a process_name event naming each track the input leaves unnamed; then
--      a process per method in $methods, named `Critical path (METHOD)`, with a thread per
--      rank the path ran on and one slice per path node;
--   3. `s`/`f` flow events of cat `critical_path` joining consecutive nodes of the $primary
--      path, bound to the events they ran (the last counted event of a node, the first of the
--      next); for cross_rank these cross ranks where the path does. When cross_rank is drawn
--      but is not $primary, its rank crossings get flows of cat `cross_rank_path`.
-- Times are each rank's own, as in its file: warehouse microseconds go back through
-- raw = (us + runs.origin_ts - traces.ts_offset_us) / scale (scale 0.001 for files of whole
-- nanoseconds), so the added slices and flows line up with the events they mark.
-- Rewritten events keep their ts text exact: JSON functions read numbers as doubles, which
-- would drop the nanosecond digits of an epoch-microsecond ts (and turn 4458676544500.000
-- into an integer), so the ts text is copied from the file's text.
-- Parameters: run_id, rank (NULL = all), methods (list), primary, remap; the views overlay_input
-- and overlay_pids.
-- Named steps: each statement before the last makes a private temp table (_overlay_*): the
-- clocks, each input event's fields, the path rows, the added events; the last SELECT puts the
-- input events and the added ones together. export/overlay.py runs them in turn, streams the
-- last one's rows and drops the tables (overlay_drop.sql).

-- Each rank's clock: the shift and scale from warehouse microseconds back to its file's ts.
CREATE OR REPLACE TEMP TABLE _overlay_clocks AS
SELECT tr.rank, tr.ts_offset_us - r.origin_ts AS shift_us,
       -- traceio.py scales whole-nanosecond timestamps (epoch ns) to microseconds
       CASE WHEN (SELECT min(ts_raw) FROM events AS x
                  WHERE x.run_id = tr.run_id AND x.rank = tr.rank AND x.ts_raw <> 0) > 1e17
            THEN 0.001 ELSE 1 END AS scale
FROM traces AS tr JOIN runs AS r USING (run_id)
WHERE tr.run_id = $run_id AND ($rank IS NULL OR tr.rank = $rank);

-- Each input event's fields the overlay reads or rewrites (its JSON text stays in overlay_input).
CREATE OR REPLACE TEMP TABLE _overlay_input AS
SELECT i.rank, i.event_id, e.ts_raw, e.dur_us, e.ph,
       -- the pid and tid as the file writes them, read where used: a complete event's (the flows
       -- bind to it) and a moved pid's (to compare)
       CASE WHEN e.ph = 'X' OR p.rank IS NOT NULL THEN i.json -> '$.pid' END AS pid,
       CASE WHEN e.ph = 'X' THEN i.json -> '$.tid' END AS tid,
       json_type(i.json, '$.args') AS args_type,
       TRY_CAST(json_extract_string(i.json, '$.id') AS BIGINT) AS flow_id,
       -- the overlay pid keeps the JSON type of the pid (a number, or digits as text)
       CASE WHEN p.rank IS NULL THEN NULL
            WHEN p.overlay_pid IS NULL THEN to_json(p.overlay_text)
            WHEN json_type(i.json, '$.pid') = 'VARCHAR' THEN to_json(p.overlay_pid::VARCHAR)
            ELSE to_json(p.overlay_pid) END AS new_pid,
       CASE WHEN e.name = 'process_name' AND e.ph = 'M' AND p.rank IS NOT NULL
            THEN p.track || coalesce(' (' || json_extract_string(e.args, '$.name') || ')', '') END AS track_name
FROM overlay_input AS i
JOIN events AS e ON e.run_id = $run_id AND e.rank = i.rank AND e.event_id = i.event_id
LEFT JOIN overlay_pids AS p ON p.rank = i.rank AND p.pid = e.pid;

-- The input's flow ids: the largest, and the stride that keeps each rank's flows apart.
CREATE OR REPLACE TEMP TABLE _overlay_flow_ids AS
SELECT coalesce(max(flow_id), 0) AS largest, max(rank) AS last_rank,
       CAST(10 ** ceil(log10(greatest(coalesce(max(flow_id), 0), 0) + 2)) AS BIGINT) AS stride
FROM _overlay_input;

-- The rows of each drawn path, in their rank's file time.
CREATE OR REPLACE TEMP TABLE _overlay_path AS
SELECT p.method, list_position($methods, p.method) AS method_index, p.rank AS path_rank,
       coalesce(p.node_rank, p.rank) AS rank, p.step, p.seq, p.node_id,
       (p.counted_start_us - c.shift_us) / c.scale AS start_raw,
       greatest(p.counted_end_us - p.counted_start_us, 0) / c.scale AS dur_raw,
       p.counted_us, p.kind, p.edge_type, p.gap_before_us, p.gap_kind,
       n.phase, n.label, n.stream, n.tid, n.carry_in, n.event_count
FROM critical_path AS p
JOIN _overlay_clocks AS c ON c.rank = coalesce(p.node_rank, p.rank)
-- cross_rank rows are stretches of the ranks' ctda paths: their nodes are ctda's
JOIN nodes AS n ON n.run_id = p.run_id AND n.rank = coalesce(p.node_rank, p.rank) AND n.step = p.step
    AND n.method = CASE WHEN p.method = 'cross_rank' THEN 'ctda' ELSE p.method END AND n.node_id = p.node_id
WHERE p.run_id = $run_id AND list_contains($methods, p.method)
  AND ($rank IS NULL OR coalesce(p.node_rank, p.rank) = $rank);

-- Added events (2. above): the names of unnamed tracks, a process per path, its slices.
CREATE OR REPLACE TEMP TABLE _overlay_path_events AS
WITH path_process AS (
    -- pids above any Kineto pid, one per method; a thread per rank the path ran on
    SELECT DISTINCT method, method_index, 2000000000 + method_index AS pid, rank FROM _overlay_path
),
track_names AS (
    -- the tracks the input names no process of (a process_name per pid of each rank)
    SELECT 2 AS part, rank, -1 AS position,
           json_object('name', 'process_name', 'ph', 'M', 'ts', 0,
                       'pid', coalesce(to_json(overlay_pid), to_json(overlay_text)), 'tid', 0,
                       'args', json_object('name', track))::VARCHAR AS event
    FROM overlay_pids
    WHERE process_name IS NULL
),
path_metadata AS (
    SELECT DISTINCT 2 AS part, -1 AS rank, method_index AS position,
           json_object('name', 'process_name', 'ph', 'M', 'ts', 0, 'pid', pid, 'tid', 0,
                       'args', json_object('name', 'Critical path (' || method || ')'))::VARCHAR AS event
    FROM path_process
    UNION ALL
    SELECT DISTINCT 2, -1, method_index,
           json_object('name', 'process_sort_index', 'ph', 'M', 'ts', 0, 'pid', pid, 'tid', 0,
                       'args', json_object('sort_index', -100 + method_index))::VARCHAR
    FROM path_process
    UNION ALL
    SELECT 2, rank, method_index,
           json_object('name', 'thread_name', 'ph', 'M', 'ts', 0, 'pid', pid, 'tid', rank,
                       'args', json_object('name', 'rank ' || rank || ' (' || method || ')'))::VARCHAR
    FROM path_process
),
path_slices AS (
    SELECT 3 AS part, p.path_rank AS rank, p.method_index::BIGINT * 1000000000 + p.step * 100000 + p.seq AS position,
           json_object(
               'name', coalesce(p.phase, p.kind) || ' · ' || coalesce(p.label, p.kind),
               'cat', 'critical_path', 'ph', 'X', 'ts', p.start_raw, 'dur', p.dur_raw,
               'pid', pp.pid, 'tid', p.rank,
               'args', json_object(
                   'method', p.method, 'step', p.step, 'seq', p.seq, 'node_id', p.node_id,
                   'rank', p.rank, 'kind', p.kind, 'phase', p.phase, 'label', p.label,
                   'counted_us', p.counted_us, 'edge_type', p.edge_type,
                   'gap_before_us', p.gap_before_us, 'gap_kind', p.gap_kind,
                   'stream', p.stream, 'thread', p.tid, 'carry_in', p.carry_in,
                   'event_count', p.event_count))::VARCHAR AS event
    FROM _overlay_path AS p
    JOIN path_process AS pp USING (method, rank)
)
SELECT * FROM track_names
UNION ALL SELECT * FROM path_metadata
UNION ALL SELECT * FROM path_slices;

-- Added events (3. above): the flows between consecutive nodes of the drawn paths.
CREATE OR REPLACE TEMP TABLE _overlay_flows AS
WITH located AS (
    -- complete input events with their middle, in the file's own time units
    SELECT i.rank, i.event_id, coalesce(i.new_pid, i.pid) AS pid, i.tid,
           i.ts_raw AS start_raw, i.ts_raw + coalesce(i.dur_us, 0) / c.scale AS end_raw
    FROM _overlay_input AS i
    JOIN _overlay_clocks AS c USING (rank)
    WHERE i.ph = 'X'
),
anchors AS (
    -- per node of a flowing path: its first and its last counted complete event
    SELECT pe.method, pe.rank AS path_rank, coalesce(pe.node_rank, pe.rank) AS rank, pe.step, pe.node_id,
           arg_min(struct_pack(ts := (l.start_raw + l.end_raw) / 2, pid := l.pid, tid := l.tid), l.start_raw)
               AS first_event,
           arg_max(struct_pack(ts := (l.start_raw + l.end_raw) / 2, pid := l.pid, tid := l.tid), l.end_raw)
               AS last_event
    FROM path_events AS pe
    JOIN located AS l ON l.rank = coalesce(pe.node_rank, pe.rank) AND l.event_id = pe.event_id
    WHERE pe.run_id = $run_id
      AND (pe.method = $primary OR (pe.method = 'cross_rank' AND list_contains($methods, 'cross_rank')))
    GROUP BY ALL
),
hops AS (
    SELECT p.method, p.path_rank, p.step, p.seq, p.rank AS from_rank, lead(p.rank) OVER w AS to_rank,
           a.last_event AS source, lead(a.first_event) OVER w AS target
    FROM _overlay_path AS p
    JOIN anchors AS a USING (method, path_rank, rank, step, node_id)
    WINDOW w AS (PARTITION BY p.method, p.path_rank, p.step ORDER BY p.seq)
    QUALIFY lead(a.first_event) OVER w IS NOT NULL
),
drawn_hops AS (
    SELECT h.*, CASE WHEN h.method = $primary THEN 'critical_path' ELSE 'cross_rank_path' END AS flow_cat,
           row_number() OVER (ORDER BY h.method <> $primary, h.path_rank, h.step, h.seq) AS flow_number
    FROM hops AS h
    WHERE h.method = $primary OR h.from_rank <> h.to_rank
)
SELECT 4 AS part, h.path_rank AS rank, h.flow_number * 2 AS position,
       json_object('name', h.flow_cat, 'cat', h.flow_cat, 'ph', 's',
                   'id', f.base + h.flow_number, 'ts', h.source.ts,
                   'pid', h.source.pid, 'tid', h.source.tid)::VARCHAR AS event
FROM drawn_hops AS h
CROSS JOIN (SELECT CASE WHEN $remap THEN (last_rank + 1) * stride ELSE largest END + 1 AS base
            FROM _overlay_flow_ids) AS f
UNION ALL
SELECT 4, h.path_rank, h.flow_number * 2 + 1,
       json_object('name', h.flow_cat, 'cat', h.flow_cat, 'ph', 'f', 'bp', 'e',
                   'id', f.base + h.flow_number, 'ts', h.target.ts,
                   'pid', h.target.pid, 'tid', h.target.tid)::VARCHAR
FROM drawn_hops AS h
CROSS JOIN (SELECT CASE WHEN $remap THEN (last_rank + 1) * stride ELSE largest END + 1 AS base
            FROM _overlay_flow_ids) AS f;

-- The overlay's events: the input events (1. above: marked, moved, renamed), then the added ones.
WITH critical AS (
    SELECT DISTINCT coalesce(node_rank, rank) AS rank, event_id
    FROM path_events
    WHERE run_id = $run_id AND method = $primary AND ($rank IS NULL OR coalesce(node_rank, rank) = $rank)
),
marked AS (
    SELECT i.*, o.json,
           k.event_id IS NOT NULL AND coalesce(i.args_type, 'OBJECT') = 'OBJECT' AS mark,
           $remap AND i.flow_id IS NOT NULL AS move_id,
           coalesce(i.new_pid::VARCHAR <> i.pid::VARCHAR, false) AS move_pid,
           i.track_name IS NOT NULL AND coalesce(i.args_type, 'OBJECT') = 'OBJECT' AS rename
    FROM _overlay_input AS i
    JOIN overlay_input AS o USING (rank, event_id)
    LEFT JOIN critical AS k USING (rank, event_id)
),
input_events AS (
    SELECT 1 AS part, m.rank, m.event_id AS position,
           CASE WHEN NOT (m.mark OR m.move_id OR m.move_pid OR m.rename) THEN m.json
                ELSE '{"ts":' || m.ts_text || ','
                     || substr(json_merge_patch(m.json, '{"ts": null}',
                            CASE WHEN m.mark OR m.rename THEN json_object('args', json_merge_patch(
                                coalesce(m.json -> '$.args', '{}'),
                                CASE WHEN m.mark THEN '{"critical": 1}' ELSE '{}' END,
                                CASE WHEN m.rename THEN json_object('name', m.track_name) ELSE '{}' END))
                                 ELSE '{}' END,
                            CASE WHEN m.move_id THEN json_object(
                                'id', m.flow_id + m.rank * (SELECT stride FROM _overlay_flow_ids)) ELSE '{}' END,
                            CASE WHEN m.move_pid THEN json_object('pid', m.new_pid) ELSE '{}' END)::VARCHAR, 2)
           END AS event
    FROM (
        -- the ts as the file writes it: the first "ts" number of the object when it reads as
        -- the ts ingest stored (a nested "ts" in args could come first), else the stored value
        SELECT *, CASE WHEN TRY_CAST(found_ts AS DECIMAL(38, 6)) = ts_raw THEN found_ts
                       ELSE rtrim(rtrim(ts_raw::VARCHAR, '0'), '.') END AS ts_text
        FROM (SELECT *, regexp_extract(json, '"ts"\s*:\s*(-?[0-9][0-9.eE+-]*)', 1) AS found_ts
              FROM marked WHERE mark OR move_id OR move_pid OR rename)
        UNION ALL BY NAME
        SELECT *, NULL AS found_ts, NULL AS ts_text FROM marked WHERE NOT (mark OR move_id OR move_pid OR rename)
    ) AS m
)
SELECT event
FROM (
    SELECT * FROM input_events
    UNION ALL SELECT * FROM _overlay_path_events
    UNION ALL SELECT * FROM _overlay_flows
)
-- the event's text breaks ties (a process's name and sort index share a position): the same
-- run writes the same file
ORDER BY part, rank, position, event;
