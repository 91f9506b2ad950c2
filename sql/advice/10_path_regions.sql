-- reads: analysis_windows, critical_path, nodes, path_events, events, threads
-- makes: _adv_windows(run_id, rank, step, start_us, window_us)
-- makes: _adv_path_stretches(method, run_id, rank, step, pid, tid, from_us, to_us)
-- makes: _adv_path_events(method, run_id, rank, step, event_id, name, cat, self_us, inclusive_us, kind)
-- makes: _adv_events(run_id, rank, step, event_id, name, cat, self_us, inclusive_us, kind)
-- makes: _adv_path_annotations(method, run_id, rank, step, name, path_us, occurrences)
-- makes: _adv_annotations(run_id, rank, step, name, path_us, occurrences)
-- param: run_id INTEGER
-- param: rank INTEGER   NULL: every rank
-- param: step BIGINT    NULL: every step
-- Where the critical path's time goes, by region, for `advise` (warehouse/advice/advise.py).
-- _adv_windows: the analysed windows in scope.
-- _adv_path_stretches: the stretches of a path that a CPU thread holds: each CPU node's
--     counted window, the gap before it (from the window's start, or from the node the path
--     came from: the thread runs untraced work, or wakes from a sync or a handoff of the GIL,
--     there), and after the window's last node, when that is a CPU node, the rest of the window.
--     A thread that sleeps or waits inside an annotation holds the path there, and the replay
--     of the annotation at zero removes that time with it.
-- _adv_events: counted events on the ctda path; kind: op, kernel, runtime, python, other.
-- _adv_annotations: user annotations (not ProfilerStep#) on main and autograd threads, with
--     the path time they enclose.
-- The _adv_path_ tables are kept for the ctda path of each rank (method 'ctda'; _adv_events and
-- _adv_annotations are those rows, which the rules read) and for the job's cross-rank path of each
-- step (method 'cross_rank'; rank is the rank of the node, step the job's step): the replay of a
-- multi-rank job's step removes a region on every rank the step's path crosses.

CREATE OR REPLACE TEMP TABLE _adv_windows AS
SELECT run_id, rank, step, start_us, window_us
FROM analysis_windows
WHERE run_id = $run_id AND ($rank IS NULL OR rank = $rank) AND ($step IS NULL OR step = $step);

CREATE OR REPLACE TEMP TABLE _adv_path_stretches AS
WITH path AS (
    SELECT c.method, c.run_id, coalesce(c.node_rank, c.rank) AS rank, c.rank AS job_rank, c.step, c.seq,
           c.counted_start_us, c.counted_end_us, c.gap_before_us, n.kind, n.pid, n.tid,
           w.start_us + w.window_us AS window_end_us,
           c.seq = max(c.seq) OVER by_path AS is_last,
           lag(coalesce(c.node_rank, c.rank)) OVER (PARTITION BY c.method, c.run_id, c.rank, c.step ORDER BY c.seq)
               AS previous_rank
    FROM critical_path AS c
    -- a cross-rank path runs through the ctda nodes of each rank it crosses
    JOIN nodes AS n
        ON n.run_id = c.run_id AND n.rank = coalesce(c.node_rank, c.rank) AND n.step = c.step
       AND n.method = 'ctda' AND n.node_id = c.node_id
    JOIN _adv_windows AS w ON w.run_id = c.run_id AND w.rank = c.rank AND w.step = c.step
    WHERE c.method IN ('ctda', 'cross_rank')
    WINDOW by_path AS (PARTITION BY c.method, c.run_id, c.rank, c.step)
)
SELECT method, run_id, rank, step, pid, tid, counted_start_us AS from_us, counted_end_us AS to_us
FROM path
WHERE kind = 'cpu'
UNION ALL
-- (after a node of another rank, the gap is the wait for that rank: no thread of this one's)
SELECT method, run_id, rank, step, pid, tid, counted_start_us - gap_before_us, counted_start_us
FROM path
WHERE kind = 'cpu' AND gap_before_us > 0 AND (previous_rank IS NULL OR previous_rank = rank)
UNION ALL
SELECT method, run_id, rank, step, pid, tid, counted_end_us, window_end_us
FROM path
WHERE kind = 'cpu' AND is_last AND rank = job_rank AND window_end_us > counted_end_us;

CREATE OR REPLACE TEMP TABLE _adv_path_events AS
SELECT e.method, e.run_id, coalesce(e.node_rank, e.rank) AS rank, e.step, e.event_id, e.name, e.cat,
       e.self_us, e.inclusive_us,
       CASE WHEN is_gpu_work(e.cat) THEN 'kernel'
            WHEN is_cpu_op_event(e.cat, e.name) THEN 'op'
            WHEN kineto_category(e.cat, e.name) IN ('cuda_runtime', 'cuda_driver') THEN 'runtime'
            WHEN e.cat = 'python_function' THEN 'python'
            ELSE 'other' END AS kind
FROM path_events AS e
SEMI JOIN _adv_windows AS w USING (run_id, rank, step)
WHERE e.method IN ('ctda', 'cross_rank');

CREATE OR REPLACE TEMP TABLE _adv_events AS
SELECT run_id, rank, step, event_id, name, cat, self_us, inclusive_us, kind
FROM _adv_path_events WHERE method = 'ctda';

CREATE OR REPLACE TEMP TABLE _adv_path_annotations AS
SELECT s.method, s.run_id, s.rank, s.step, a.name,
       sum(least(a.end_us, s.to_us) - greatest(a.ts_us, s.from_us)) AS path_us,
       count(DISTINCT a.event_id) AS occurrences
FROM _adv_path_stretches AS s
JOIN events AS a
    ON a.run_id = s.run_id AND a.rank = s.rank AND a.pid IS NOT DISTINCT FROM s.pid AND a.tid = s.tid
   AND a.ph = 'X' AND is_annotation_event(a.cat, a.name) AND NOT starts_with(a.name, 'ProfilerStep#')
   AND a.ts_us < s.to_us AND a.end_us > s.from_us
JOIN threads AS t
    ON t.run_id = a.run_id AND t.rank = a.rank AND t.pid = a.pid AND t.tid = a.tid
   AND t.role IN ('main', 'autograd')
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE _adv_annotations AS
SELECT run_id, rank, step, name, path_us, occurrences FROM _adv_path_annotations WHERE method = 'ctda';
