-- name: cpcr
-- description: Critical-path coverage per step, with the rest of the step split by cause
-- param: run VARCHAR = NULL        run name; all runs when NULL
-- param: rank INTEGER = NULL       rank; all ranks when NULL
-- param: step BIGINT = NULL        step (window) number; all steps when NULL
-- param: method VARCHAR = NULL     ctda, per_thread or cross_rank; all when NULL
-- param: top INTEGER = 1000        rows to keep
-- key: rank, step, method, cpcr, cpu_gap_us
-- counted + cpu_gap + gpu_idle + launch_delay + between_nodes + slack_before + slack_after
--   + queued_idle = step. queued_idle_us: a device sat idle with work queued (an op on the path
--   waited more than 100 us on an idle stream) for a cause the trace does not show: events
--   missing from it, or a wait on another rank (see method cross_rank). The other device
--   categories are what is left: gpu_idle_us a device with nothing to do.
-- A window the engine found no path in (nothing on it to place) is still listed, with CPCR 0,
-- the whole step as slack_before_us and the reason in `note`. A cross_rank path is one per
-- step, on the rank that finished last: the other ranks' windows of that step are not missing it.
-- A run of one rank gets no cross_rank rows (they would repeat ctda's).
-- A ctda or cross_rank step under CPCR 0.8 (and no other note) names in `note` the largest part
--   of the rest and, for ctda, the annotation of the main or autograd thread holding most of it.
WITH path AS (
    SELECT run_id, rank, step, method,
           sum(counted_us) AS path_us,
           coalesce(sum(counted_end_us - counted_start_us - counted_us) FILTER (WHERE kind = 'cpu'), 0) AS cpu_gap_us,
           coalesce(sum(counted_end_us - counted_start_us - counted_us - coalesce(queued_idle_us, 0))
                    FILTER (WHERE kind = 'gpu'), 0) AS gpu_idle_us,
           coalesce(sum(gap_before_us - coalesce(queued_gap_us, 0)) FILTER (WHERE gap_kind = 'launch_delay'), 0)
               AS launch_delay_us,
           coalesce(sum(gap_before_us - coalesce(queued_gap_us, 0)) FILTER (WHERE gap_kind = 'between_nodes'), 0)
               AS between_nodes_us,
           coalesce(sum(gap_before_us - coalesce(queued_gap_us, 0)) FILTER (WHERE gap_kind = 'slack_before'), 0)
               AS slack_before_us,
           coalesce(sum(coalesce(queued_gap_us, 0) + coalesce(queued_idle_us, 0)), 0) AS queued_idle_us,
           -- the last row's end (a cross_rank path's rows keep their own ranks' clocks)
           arg_max(counted_end_us, seq) AS last_counted_end_us,
           count(*) AS path_nodes
    FROM critical_path
    GROUP BY run_id, rank, step, method
),
-- the methods analyzed per run (both when no window of the run has a path)
run_methods AS (
    SELECT DISTINCT run_id, method FROM critical_path
    UNION
    SELECT w.run_id, m.method
    FROM (SELECT DISTINCT run_id FROM analysis_windows
          WHERE run_id NOT IN (SELECT run_id FROM critical_path)) AS w,
         (VALUES ('ctda'), ('per_thread')) AS m(method)
),
window_paths AS (
    SELECT w.run_id, w.rank, w.step, m.method, w.window_us, w.e2e_end_us,
           coalesce(p.path_us, 0) AS path_us,
           coalesce(p.cpu_gap_us, 0) AS cpu_gap_us, coalesce(p.gpu_idle_us, 0) AS gpu_idle_us,
           coalesce(p.launch_delay_us, 0) AS launch_delay_us,
           coalesce(p.between_nodes_us, 0) AS between_nodes_us,
           coalesce(p.slack_before_us, w.window_us) AS slack_before_us,
           coalesce(p.queued_idle_us, 0) AS queued_idle_us,
           coalesce(w.e2e_end_us - p.last_counted_end_us, 0) AS slack_after_us,
           coalesce(p.path_nodes, 0) AS path_nodes,
           CASE WHEN p.run_id IS NULL
                    THEN 'no critical path: the window holds no CPU or GPU work to place on one'
                WHEN p.queued_idle_us > 0
                    THEN 'device idle with work queued for ' || printf('%.1f', p.queued_idle_us / 1000)
                         || ' ms: the cause is not in the trace (events missing, or a wait on another rank)'
           END AS note
    FROM analysis_windows AS w
    JOIN run_methods AS m USING (run_id)
    LEFT JOIN path AS p USING (run_id, rank, step, method)
    -- one rank's cross-rank path is its ctda path: a row that only repeats ctda is left out
    WHERE NOT (m.method = 'cross_rank'
               AND (SELECT count(DISTINCT a.rank) FROM analysis_windows AS a WHERE a.run_id = w.run_id) = 1)
      AND NOT (m.method = 'cross_rank' AND p.run_id IS NULL
               AND EXISTS (SELECT 1 FROM path AS q
                           WHERE q.run_id = w.run_id AND q.step = w.step AND q.method = 'cross_rank'))
),
-- A ctda or cross_rank step under 0.8 names the largest part of the rest (per_thread paths
-- leave the other threads out by design). For ctda, also the annotation of the main or
-- autograd thread that holds most of that part: time inside an annotation that the path
-- does not cover is work the trace does not show (Python, data loading, a wait on workers).
rest AS (
    SELECT p.run_id, p.rank, p.step, p.method, p.window_us, p.e2e_end_us, p.path_us, part.name AS part,
           part.us AS part_us
    FROM (SELECT *, unnest([{'name': 'cpu_gap', 'us': cpu_gap_us}, {'name': 'gpu_idle', 'us': gpu_idle_us},
                            {'name': 'launch_delay', 'us': launch_delay_us},
                            {'name': 'between_nodes', 'us': between_nodes_us},
                            {'name': 'slack_before', 'us': slack_before_us},
                            {'name': 'slack_after', 'us': slack_after_us}]) AS part
          FROM window_paths
          WHERE method <> 'per_thread' AND note IS NULL AND path_us < 0.8 * window_us
            AND ($rank IS NULL OR rank = $rank) AND ($step IS NULL OR step = $step)
            AND ($method IS NULL OR method = $method)) AS p
    QUALIFY row_number() OVER (PARTITION BY p.run_id, p.rank, p.step, p.method ORDER BY part.us DESC, part.name) = 1
),
-- the time spans of that part: gaps before path nodes, the CPU nodes (their gaps lie inside),
-- or the end of the path to the step's end
rest_spans AS (
    SELECT r.run_id, r.rank, r.step, c.counted_start_us - c.gap_before_us AS start_us, c.counted_start_us AS end_us
    FROM rest AS r JOIN critical_path AS c USING (run_id, rank, step, method)
    WHERE r.method = 'ctda' AND c.gap_kind = r.part
    UNION ALL
    SELECT r.run_id, r.rank, r.step, c.counted_start_us, c.counted_end_us
    FROM rest AS r JOIN critical_path AS c USING (run_id, rank, step, method)
    WHERE r.method = 'ctda' AND r.part = 'cpu_gap' AND c.kind = 'cpu'
    UNION ALL
    SELECT r.run_id, r.rank, r.step, max(c.counted_end_us), any_value(r.e2e_end_us)
    FROM rest AS r JOIN critical_path AS c USING (run_id, rank, step, method)
    WHERE r.method = 'ctda' AND r.part = 'slack_after'
    GROUP BY r.run_id, r.rank, r.step
),
thread_annotations AS (
    SELECT e.run_id, e.rank, e.event_id, e.name, e.ts_us, e.end_us
    FROM events AS e
    JOIN threads AS t USING (run_id, rank, pid, tid)
    WHERE t.role IN ('main', 'autograd') AND e.ph = 'X' AND is_annotation_event(e.cat, e.name)
      AND NOT starts_with(e.name, 'ProfilerStep#') AND (e.run_id, e.rank) IN (SELECT run_id, rank FROM rest)
),
-- the annotation overlapping the part's spans most; of equal overlaps, the innermost
rest_annotation AS (
    SELECT s.run_id, s.rank, s.step, a.name,
           sum(least(a.end_us, s.end_us) - greatest(a.ts_us, s.start_us)) AS inside_us,
           any_value(a.end_us - a.ts_us) AS annotation_us
    FROM rest_spans AS s
    JOIN thread_annotations AS a
        ON a.run_id = s.run_id AND a.rank = s.rank AND a.ts_us < s.end_us AND a.end_us > s.start_us
    GROUP BY s.run_id, s.rank, s.step, a.event_id, a.name
    QUALIFY row_number() OVER (PARTITION BY s.run_id, s.rank, s.step ORDER BY inside_us DESC, annotation_us) = 1
),
rest_notes AS (
    SELECT r.run_id, r.rank, r.step, r.method,
           printf('CPCR %.2f: the rest is mostly %s (%.1f ms, %.0f%% of the step): ', r.path_us / r.window_us,
                  r.part || '_us', r.part_us / 1000, 100 * r.part_us / r.window_us)
           || CASE r.part
                  WHEN 'cpu_gap' THEN 'time inside the path''s CPU nodes between traced events'
                  WHEN 'gpu_idle' THEN 'a device on the path idle inside its node'
                  WHEN 'launch_delay' THEN 'launched work waiting for its stream'
                  WHEN 'between_nodes' THEN 'time between path nodes with no traced dependency'
                  WHEN 'slack_before' THEN 'the step''s start, before the path''s first node'
                  ELSE 'the step''s end, after the path''s last node'
              END
           || coalesce(', mostly inside ' || a.name
                       || ' (time the trace does not explain: untraced Python, data loading or a wait)', '') AS note
    FROM rest AS r
    LEFT JOIN rest_annotation AS a
        ON r.method = 'ctda' AND a.run_id = r.run_id AND a.rank = r.rank AND a.step = r.step
       AND a.inside_us > r.part_us / 2
)
SELECT r.name AS run, p.rank, p.step, p.method,
       p.window_us AS step_us,
       p.path_us,
       CASE WHEN p.window_us > 0 THEN p.path_us / p.window_us ELSE 0 END AS cpcr,
       p.cpu_gap_us, p.gpu_idle_us, p.launch_delay_us, p.between_nodes_us, p.slack_before_us,
       p.slack_after_us, p.queued_idle_us,
       p.path_nodes,
       coalesce(p.note, n.note) AS note
FROM window_paths AS p
JOIN runs AS r USING (run_id)
LEFT JOIN rest_notes AS n USING (run_id, rank, step, method)
WHERE ($run IS NULL OR r.name = $run) AND ($rank IS NULL OR p.rank = $rank)
  AND ($step IS NULL OR p.step = $step) AND ($method IS NULL OR p.method = $method)
ORDER BY run, p.rank, p.step, p.method
LIMIT $top;
