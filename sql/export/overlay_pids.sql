-- The pid each (rank, pid) of a multi-rank overlay takes (`ctda-sql export overlay`, all
-- ranks in one file). Kineto's GPU pid is the local device index and its CPU pid the host's
-- process id, so two ranks can share a pid (rank 0 and rank 8 of a 2-node job both write
-- GPU 0 as pid 0): Perfetto and chrome://tracing would draw both ranks' events on one
-- (pid, tid) track. Each rank's pids therefore move by an offset of their own:
--   overlay_pid = pid + rank * stride, stride the power of ten above every pid of the file,
--   so rank 0 keeps its pids and the others read as rank, then pid (rank 1, GPU 1: 10001);
--   where that would reach the path processes' pids (2,000,000,000 + method, overlay_events.sql)
--   or a pid is negative, each rank's pids are numbered instead: rank position * stride + the
--   pid's place among the rank's pids, in pid order;
--   a pid that is not a whole number ("Spans") becomes the text 'rank R · PID'.
-- `track` names the process ("rank 1 · GPU 1", "rank 0 · pid 4037"): a pid with device work
-- (events.stream) or a process_labels "GPU ..." is a GPU; `process_name` is the input's own
-- name of the process, if it has one. Parameters: run_id, ranks (list).
WITH used AS (
    SELECT rank, pid, TRY_CAST(pid AS BIGINT) AS number,
           bool_or(stream IS NOT NULL
                   OR (name = 'process_labels' AND json_extract_string(args, '$.labels') ILIKE 'GPU%')) AS device,
           max(json_extract_string(args, '$.name')) FILTER (WHERE name = 'process_name' AND ph = 'M') AS process_name
    FROM events
    WHERE run_id = $run_id AND list_contains($ranks, rank) AND pid IS NOT NULL
    GROUP BY rank, pid
),
numbered AS (
    SELECT *, dense_rank() OVER (ORDER BY rank) - 1 AS rank_position,
           CASE WHEN number IS NOT NULL THEN dense_rank() OVER (PARTITION BY rank, number IS NULL ORDER BY number) - 1
           END AS place
    FROM used
),
layout AS (
    SELECT CAST(10 ** greatest(1, ceil(log10(coalesce(max(number), 0) + 1))) AS BIGINT) AS stride,
           CAST(10 ** greatest(1, ceil(log10(coalesce(max(place), 0) + 1))) AS BIGINT) AS place_stride,
           coalesce(min(number), 0) >= 0
               AND (max(rank) + 1) * 10 ** greatest(1, ceil(log10(coalesce(max(number), 0) + 1))) <= 2000000000
               AS by_pid
    FROM numbered
)
SELECT n.rank, n.pid,
       CASE WHEN n.number IS NULL THEN NULL
            WHEN l.by_pid THEN n.number + n.rank * l.stride
            ELSE n.place + n.rank_position * l.place_stride END AS overlay_pid,
       CASE WHEN n.number IS NULL THEN 'rank ' || n.rank || ' · ' || n.pid END AS overlay_text,
       'rank ' || n.rank || ' · ' || CASE WHEN n.number IS NULL THEN n.pid
                                          WHEN n.device THEN 'GPU ' || n.pid
                                          ELSE 'pid ' || n.pid END AS track,
       n.process_name,
       CASE WHEN l.by_pid THEN 'pid + rank * ' || l.stride
            ELSE 'rank position * ' || l.place_stride || ' + the place of the pid among the rank''s pids'
       END AS rule
FROM numbered AS n
CROSS JOIN layout AS l
ORDER BY n.rank, n.number NULLS LAST, n.pid;
