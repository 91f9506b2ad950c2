-- reads: cp_gpu_in_window, cp_gpu_ops
-- makes: rows(wait_us, gap_us, launched_before)
-- For bench/handoff_stats.py, after the stages ran: every device op launched from a window's
-- CPU node, how long it waited past its launch and its stream predecessor (wait_us), and
-- how long before its start the last op on another stream ended (gap_us), among the ops
-- launched before it (launched_before) when there is one, else among all.
WITH ready AS (
    SELECT k.run_id, k.rank, k.event_id, k.ts_us, k.stream, k.launch_start_us,
           k.ts_us - greatest(coalesce(k.prev_end_on_stream, '-infinity'::DOUBLE),
                              coalesce(k.launch_enqueued_us, '-infinity'::DOUBLE)) AS wait_us
    FROM cp_gpu_in_window AS k
    WHERE k.cpu_node IS NOT NULL
),
nearest AS (
    SELECT r.event_id, r.run_id, r.rank, r.wait_us,
           min(r.ts_us - o.end_us) FILTER (WHERE o.launch_start_us < r.launch_start_us) AS gap_before_launch_us,
           min(r.ts_us - o.end_us) AS gap_any_us
    FROM ready AS r
    JOIN cp_gpu_ops AS o
        ON o.run_id = r.run_id AND o.rank = r.rank AND o.stream <> r.stream
       AND o.end_us <= r.ts_us AND o.end_us >= r.ts_us - 100000
    GROUP BY ALL
)
SELECT r.wait_us, coalesce(n.gap_before_launch_us, n.gap_any_us) AS gap_us,
       n.gap_before_launch_us IS NOT NULL AS launched_before
FROM ready AS r
LEFT JOIN nearest AS n USING (run_id, rank, event_id)
WHERE r.wait_us IS NOT NULL AND r.wait_us > -1e300;
