-- registered: _adv_replayed_path(place, step, node_rank, node_step, node_id, predicted_us)
-- reads: nodes, critical_path, collective_instances, events
-- makes: _adv_slack(place, step, lane_rank, lane, lane_us, top_label, top_kind, top_us, off_path_us,
--                   outside)
-- makes: _adv_unpartnered(rank, step, name, outside)
-- param: run_id INTEGER
-- What takes over when a causal-profile region takes no time: for each (region, step) whose
-- saving at zero disagrees with its path time, the replayed path of the job's step under the
-- change (_adv_replayed_path, registered by warehouse/advice/advise.py), less what the counted
-- (ctda) path already held, by lane. The lane holding most of it is the near-critical
-- alternative; a node of it that executes a collective with no partner in the trace
-- (collective_instances.unmatched_reason) makes it a wait on something outside the trace.
-- _adv_slack: lane is 'stream N' or 'thread T'; lane_us its replayed time on the new path off
--     the counted path; top_label its node label holding the most; off_path_us all of the new
--     path's time off the counted path; outside why a collective on that lane has no partner
--     (NULL: every one has).
-- _adv_unpartnered: the events (by name) that run a collective with no partner in the trace, per
--     rank and step, and why: a region of that name waits on something outside the trace.

CREATE OR REPLACE TEMP TABLE _adv_slack AS
WITH replayed AS (
    SELECT p.place, p.step, p.node_rank, p.node_id, p.predicted_us, n.kind, n.label, n.start_us, n.end_us,
           n.stream, n.tid, n.pid,
           CASE WHEN n.kind = 'gpu' THEN 'stream ' || n.stream ELSE 'thread ' || n.tid END AS lane
    FROM _adv_replayed_path AS p
    JOIN nodes AS n
        ON n.run_id = $run_id AND n.rank = p.node_rank AND n.step = p.node_step AND n.node_id = p.node_id
       AND n.method = 'ctda'
    -- what the counted path held already is not an alternative to it
    ANTI JOIN critical_path AS c
        ON c.run_id = $run_id AND c.rank = p.node_rank AND c.step = p.node_step AND c.node_id = p.node_id
       AND c.method = 'ctda'
    WHERE p.predicted_us > 0
),
unpartnered AS (
    -- collectives that wait for a partner the trace does not hold, by the event that ran them
    SELECT r.place, r.step, r.node_rank AS lane_rank, r.lane, min(i.unmatched_reason) AS outside
    FROM replayed AS r
    JOIN collective_instances AS i
        ON i.run_id = $run_id AND i.rank = r.node_rank AND NOT i.matched
    JOIN events AS e
        ON e.run_id = i.run_id AND e.rank = i.rank AND e.event_id = coalesce(i.exec_event_id, i.cpu_event_id)
       AND e.ts_us < r.end_us AND e.end_us > r.start_us
       AND ((r.kind = 'gpu' AND e.stream = r.stream)
            OR (r.kind = 'cpu' AND e.tid = r.tid AND e.pid IS NOT DISTINCT FROM r.pid))
    GROUP BY ALL
),
lanes AS (
    SELECT place, step, node_rank AS lane_rank, lane, sum(predicted_us) AS lane_us
    FROM replayed
    GROUP BY ALL
),
labels AS (
    SELECT place, step, node_rank AS lane_rank, lane, kind, label, sum(predicted_us) AS label_us
    FROM replayed
    GROUP BY ALL
),
top_lane AS (
    SELECT place, step, lane_rank, lane, lane_us, sum(lane_us) OVER (PARTITION BY place, step) AS off_path_us
    FROM lanes
    QUALIFY row_number() OVER (PARTITION BY place, step ORDER BY lane_us DESC, lane_rank, lane) = 1
)
SELECT t.place, t.step, t.lane_rank, t.lane, t.lane_us,
       arg_max(l.label, l.label_us) AS top_label, arg_max(l.kind, l.label_us) AS top_kind,
       max(l.label_us) AS top_us, t.off_path_us, any_value(u.outside) AS outside
FROM top_lane AS t
JOIN labels AS l USING (place, step, lane_rank, lane)
LEFT JOIN unpartnered AS u USING (place, step, lane_rank, lane)
GROUP BY t.place, t.step, t.lane_rank, t.lane, t.lane_us, t.off_path_us;

CREATE OR REPLACE TEMP TABLE _adv_unpartnered AS
SELECT i.rank, i.step, e.name, min(i.unmatched_reason) AS outside
FROM collective_instances AS i
JOIN events AS e
    ON e.run_id = i.run_id AND e.rank = i.rank AND (e.event_id = i.exec_event_id OR e.event_id = i.cpu_event_id)
WHERE i.run_id = $run_id AND NOT i.matched
GROUP BY ALL;
