-- How much each event's execution time changes under the scenario: a factor per event from
-- the --scale rules (wi_rules, the last matching rule wins) times the network model's factor
-- for collectives. Then, per lane (CPU thread or GPU stream), the stretches of time that
-- shrink: the outermost changed events, with the running total removed before each.

CREATE OR REPLACE TEMP TABLE wi_comm_factors AS
WITH modelled AS (
    SELECT c.run_id, c.rank, c.event_id, c.dur_us,
           f.alpha_us + c.bytes * wi_bus_factor(c.collective, c.group_size, 'ring') / f.bytes_per_us AS before_us,
           coalesce($latency_us, f.alpha_us / wi_latency_steps(c.collective, c.group_size, 'ring'))
               * wi_latency_steps(c.collective, coalesce($world_size, c.group_size), coalesce($algorithm, 'ring'))
           + c.bytes * wi_bus_factor(c.collective, coalesce($world_size, c.group_size), coalesce($algorithm, 'ring'))
               / (f.bytes_per_us * $bandwidth_scale) AS after_us
    FROM wi_collectives AS c
    JOIN wi_comm_fit AS f USING (run_id, collective)
    WHERE $network_changed
)
-- the unexplained part of the measured time (waiting for other ranks) stays as it is
SELECT run_id, rank, event_id,
       (dur_us - least(dur_us, before_us) + least(dur_us, before_us) * after_us / before_us) / dur_us AS factor
FROM modelled WHERE before_us > 0;

CREATE OR REPLACE TEMP TABLE wi_event_factors AS
WITH scoped AS (
    SELECT e.run_id, e.rank, e.event_id, e.name, e.cat, e.ts_us, e.end_us,
           CASE WHEN is_gpu_work(e.cat) THEN 'gpu/' || e.stream ELSE 'cpu/' || e.pid || '/' || e.tid END AS lane
    FROM events AS e
    WHERE e.ph = 'X' AND e.dur_us > 0 AND (is_gpu_work(e.cat) OR NOT is_device_category(e.cat))
      AND NOT starts_with(e.name, 'ProfilerStep#')
      AND (e.run_id, e.rank) IN (SELECT DISTINCT run_id, rank FROM wi_windows)
),
by_rule AS (
    SELECT s.run_id, s.rank, s.event_id, arg_max(r.factor, r.seq) AS factor
    FROM scoped AS s
    JOIN wi_rules AS r
        ON s.name GLOB r.name_glob AND (r.cat_glob IS NULL OR s.cat GLOB r.cat_glob)
    GROUP BY ALL
)
SELECT s.run_id, s.rank, s.lane, s.event_id, s.ts_us, s.end_us,
       coalesce(r.factor, 1.0) * coalesce(c.factor, 1.0) AS factor
FROM scoped AS s
LEFT JOIN by_rule AS r USING (run_id, rank, event_id)
LEFT JOIN wi_comm_factors AS c USING (run_id, rank, event_id)
WHERE r.factor IS NOT NULL OR c.factor IS NOT NULL;

-- Outermost changed stretches per lane (an event inside a changed one follows its factor);
-- `removed_before_us` is the time removed on the lane before the stretch starts.
CREATE OR REPLACE TEMP TABLE wi_shrink AS
WITH ordered AS (
    SELECT *, max(end_us) OVER (PARTITION BY run_id, rank, lane ORDER BY ts_us, end_us DESC, event_id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered_until
    FROM wi_event_factors
),
stretches AS (
    SELECT run_id, rank, lane, greatest(ts_us, coalesce(covered_until, ts_us)) AS from_us, end_us AS to_us,
           1.0 - factor AS removed_rate
    FROM ordered WHERE end_us > coalesce(covered_until, '-infinity'::DOUBLE)
)
SELECT *, coalesce(sum((to_us - from_us) * removed_rate) OVER (
              PARTITION BY run_id, rank, lane ORDER BY from_us
              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0.0) AS removed_before_us
FROM stretches;
