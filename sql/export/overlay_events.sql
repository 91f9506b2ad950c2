-- The traceEvents of an overlay trace (`ctda-sql export overlay`), one JSON object per row,
-- in the order they are written:
--   1. every event of the chosen rank(s), rebuilt from `events` (args and extra keys kept),
--      with args.critical = 1 on each event that carries counted time on the $primary path
--      (HTA's convention);
--   2. a process per method in $methods, named `Critical path (METHOD)`, with a thread per
--      rank and one slice per path node;
--   3. `s`/`f` flow events of cat `critical_path` joining consecutive nodes of the $primary
--      path, bound to the events they ran (the last counted event of a node, the first of
--      the next).
-- Times are microseconds since the run's origin: ts is rebuilt exactly from ts_raw, so ranks
-- of one run line up. With $remap (all ranks of a multi-rank run in one file) numeric pids
-- move by rank * 10,000,000 and flow ids by rank * a power of ten above the largest, so the
-- ranks' processes and flows stay apart; process names get a `rank N · ` prefix.
-- Parameters: run_id, rank (NULL = all), methods (list), primary, remap.
WITH chosen AS (
    SELECT e.*,
           e.ts_raw * CASE WHEN t.nanosecond_ints THEN 0.001 ELSE 1 END + t.ts_offset_us - r.origin_ts
               AS ts_exact,
           TRY_CAST(e.pid AS BIGINT) AS pid_number
    FROM events AS e
    JOIN (SELECT run_id, rank, ts_offset_us,
                 -- traceio.py scales whole-nanosecond timestamps (epoch ns) to microseconds
                 (SELECT min(ts_raw) FROM events AS x
                   WHERE x.run_id = tr.run_id AND x.rank = tr.rank AND x.ts_raw <> 0) > 1e17
                     AS nanosecond_ints
          FROM traces AS tr WHERE tr.run_id = $run_id) AS t USING (run_id, rank)
    JOIN runs AS r USING (run_id)
    WHERE e.run_id = $run_id AND ($rank IS NULL OR e.rank = $rank)
),
flow_ids AS (
    SELECT coalesce(max(TRY_CAST(extra ->> 'id' AS BIGINT)), 0) AS largest, max(rank) AS last_rank,
           CAST(10 ** ceil(log10(greatest(coalesce(max(TRY_CAST(extra ->> 'id' AS BIGINT)), 0), 0) + 2))
                AS BIGINT) AS stride
    FROM chosen
),
critical AS (
    SELECT DISTINCT rank, event_id
    FROM path_events
    WHERE run_id = $run_id AND method = $primary AND ($rank IS NULL OR rank = $rank)
),
located AS (
    SELECT c.*,
           CASE WHEN c.pid_number IS NOT NULL AND c.pid_number::VARCHAR = c.pid
                THEN to_json(c.pid_number + CASE WHEN $remap THEN c.rank * 10000000 ELSE 0 END)
                WHEN $remap THEN to_json('rank ' || c.rank || ' ' || c.pid)
                ELSE to_json(c.pid) END AS pid_json,
           CASE WHEN TRY_CAST(c.tid AS BIGINT)::VARCHAR = c.tid THEN to_json(TRY_CAST(c.tid AS BIGINT))
                ELSE to_json(c.tid) END AS tid_json
    FROM chosen AS c
),
rebuilt AS (
    SELECT 1 AS part, l.rank, l.event_id AS position,
           json_merge_patch(
               CASE WHEN $remap AND TRY_CAST(l.extra ->> 'id' AS BIGINT) IS NOT NULL
                    THEN json_merge_patch(l.extra, json_object(
                        'id', TRY_CAST(l.extra ->> 'id' AS BIGINT) + l.rank * (SELECT stride FROM flow_ids)))
                    ELSE l.extra END,
               json_object(
                   'name', l.name, 'cat', l.cat, 'ph', l.ph, 'ts', l.ts_exact, 'dur', l.dur_us,
                   'pid', l.pid_json, 'tid', l.tid_json,
                   'args', CASE
                       WHEN k.event_id IS NOT NULL THEN json_merge_patch(coalesce(l.args, '{}'), '{"critical": 1}')
                       WHEN $remap AND l.ph = 'M' AND l.name = 'process_name'
                           THEN json_merge_patch(l.args, json_object('name', 'rank ' || l.rank || ' · ' || coalesce(l.args ->> 'name', l.pid)))
                       WHEN $remap AND l.ph = 'M' AND l.name = 'process_sort_index'
                           THEN json_merge_patch(l.args, json_object('sort_index', l.rank * 1000 + coalesce(TRY_CAST(l.args ->> 'sort_index' AS BIGINT), 0)))
                       ELSE l.args END)
           ) AS event
    FROM located AS l
    LEFT JOIN critical AS k USING (rank, event_id)
),
path AS (
    SELECT p.method, list_position($methods, p.method) AS method_index, p.rank, p.step, p.seq,
           p.node_id, p.counted_start_us, p.counted_end_us, p.counted_us, p.kind, p.edge_type,
           p.gap_before_us, p.gap_kind, n.phase, n.label, n.stream, n.tid, n.carry_in, n.event_count
    FROM critical_path AS p
    JOIN nodes AS n USING (run_id, rank, step, method, node_id)
    WHERE p.run_id = $run_id AND ($rank IS NULL OR p.rank = $rank) AND list_contains($methods, p.method)
),
path_process AS (
    -- pids above any remapped Kineto pid, one per method
    SELECT DISTINCT method, method_index, 2000000000 + method_index AS pid, rank FROM path
),
path_metadata AS (
    SELECT DISTINCT 2 AS part, -1 AS rank, method_index AS position,
           json_object('name', 'process_name', 'ph', 'M', 'ts', 0, 'pid', pid, 'tid', 0,
                       'args', json_object('name', 'Critical path (' || method || ')')) AS event
    FROM path_process
    UNION ALL
    SELECT DISTINCT 2, -1, method_index,
           json_object('name', 'process_sort_index', 'ph', 'M', 'ts', 0, 'pid', pid, 'tid', 0,
                       'args', json_object('sort_index', -100 + method_index))
    FROM path_process
    UNION ALL
    SELECT 2, rank, method_index,
           json_object('name', 'thread_name', 'ph', 'M', 'ts', 0, 'pid', pid, 'tid', rank,
                       'args', json_object('name', 'rank ' || rank || ' (' || method || ')'))
    FROM path_process
),
path_slices AS (
    SELECT 3 AS part, p.rank, p.method_index * 1000000000 + p.step * 100000 + p.seq AS position,
           json_object(
               'name', coalesce(p.phase, p.kind) || ' · ' || coalesce(p.label, p.kind),
               'cat', 'critical_path', 'ph', 'X',
               'ts', p.counted_start_us, 'dur', greatest(p.counted_end_us - p.counted_start_us, 0),
               'pid', pp.pid, 'tid', p.rank,
               'args', json_object(
                   'method', p.method, 'step', p.step, 'seq', p.seq, 'node_id', p.node_id,
                   'kind', p.kind, 'phase', p.phase, 'label', p.label,
                   'counted_us', p.counted_us, 'edge_type', p.edge_type,
                   'gap_before_us', p.gap_before_us, 'gap_kind', p.gap_kind,
                   'stream', p.stream, 'thread', p.tid, 'carry_in', p.carry_in,
                   'event_count', p.event_count)
           ) AS event
    FROM path AS p
    JOIN path_process AS pp USING (method, rank)
),
anchors AS (
    -- per node of the primary path: its first and its last counted complete event
    SELECT pe.rank, pe.step, pe.node_id,
           arg_min(struct_pack(ts := l.ts_exact + coalesce(l.dur_us, 0) / 2, pid := l.pid_json, tid := l.tid_json),
                   l.ts_exact) AS first_event,
           arg_max(struct_pack(ts := l.ts_exact + coalesce(l.dur_us, 0) / 2, pid := l.pid_json, tid := l.tid_json),
                   l.ts_exact + coalesce(l.dur_us, 0)) AS last_event
    FROM path_events AS pe
    JOIN located AS l USING (rank, event_id)
    WHERE pe.run_id = $run_id AND pe.method = $primary AND ($rank IS NULL OR pe.rank = $rank)
      AND l.ph = 'X'
    GROUP BY ALL
),
hops AS (
    SELECT p.rank, p.step, p.seq,
           a.last_event AS source, lead(a.first_event) OVER w AS target,
           row_number() OVER (ORDER BY p.rank, p.step, p.seq) AS flow_number
    FROM path AS p
    JOIN anchors AS a USING (rank, step, node_id)
    WHERE p.method = $primary
    WINDOW w AS (PARTITION BY p.rank, p.step ORDER BY p.seq)
    QUALIFY lead(a.first_event) OVER w IS NOT NULL
),
flows AS (
    SELECT 4 AS part, h.rank, h.flow_number * 2 AS position,
           json_object('name', 'critical_path', 'cat', 'critical_path', 'ph', 's',
                       'id', f.base + h.flow_number, 'ts', h.source.ts,
                       'pid', h.source.pid, 'tid', h.source.tid) AS event
    FROM hops AS h
    CROSS JOIN (SELECT CASE WHEN $remap THEN (last_rank + 1) * stride ELSE largest END + 1 AS base FROM flow_ids) AS f
    UNION ALL
    SELECT 4, h.rank, h.flow_number * 2 + 1,
           json_object('name', 'critical_path', 'cat', 'critical_path', 'ph', 'f', 'bp', 'e',
                       'id', f.base + h.flow_number, 'ts', h.target.ts,
                       'pid', h.target.pid, 'tid', h.target.tid)
    FROM hops AS h
    CROSS JOIN (SELECT CASE WHEN $remap THEN (last_rank + 1) * stride ELSE largest END + 1 AS base FROM flow_ids) AS f
)
SELECT event::VARCHAR AS event
FROM (
    SELECT * FROM rebuilt
    UNION ALL SELECT * FROM path_metadata
    UNION ALL SELECT * FROM path_slices
    UNION ALL SELECT * FROM flows
)
ORDER BY part, rank, position;
