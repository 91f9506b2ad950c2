-- The wi_queue_waits statement of sql/whatif/15_graph.sql as it was at aa51275, before issue 32
-- replaced its `waits` join (every slow launch with every window of its rank) by positions.
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_wi_queue_waits AS
WITH launches AS (
    SELECT e.run_id, e.rank, e.event_id, 'cpu/' || e.pid || '/' || e.tid AS lane, e.ts_us, e.end_us,
           e.dur_us, median(e.dur_us) OVER (PARTITION BY e.run_id, e.rank, e.name) AS typical_us,
           e.correlation
    FROM events AS e
    WHERE e.ph = 'X' AND is_runtime_category(e.cat) AND (e.name ILIKE '%Launch%' OR e.name ILIKE '%MemsetAsync')
      AND (e.run_id, e.rank) IN (SELECT DISTINCT run_id, rank FROM wi_windows)
),
waits AS (
    SELECT w.window_index, w.window_us, l.run_id, l.rank, l.event_id, l.lane,
           greatest(l.ts_us + l.typical_us, w.start_us) AS ts_us, least(l.end_us, w.start_us + w.window_us) AS end_us
    FROM launches AS l
    JOIN wi_windows AS w
        ON w.run_id = l.run_id AND w.rank = l.rank AND l.end_us > w.start_us AND l.ts_us < w.start_us + w.window_us
    WHERE l.dur_us - l.typical_us >= $queue_wait_us
      -- a launch whose own GPU work started within $queue_wait_us of its return found room
      -- in the queue (a full one holds ~1000 launches ahead of it): it was slow for another
      -- reason (a preempted thread, module loading)
      AND NOT EXISTS (SELECT 1 FROM events AS k
                      WHERE k.run_id = l.run_id AND k.rank = l.rank AND k.correlation = l.correlation
                        AND is_gpu_work(k.cat) AND k.ts_us - l.end_us < $queue_wait_us)
)
-- a stray slow launch (a first launch loading modules, the thread preempted) is no full
-- queue: only windows whose launches waited $queue_share of their length count
SELECT * FROM waits
QUALIFY sum(end_us - ts_us) OVER (PARTITION BY window_index) >= $queue_share * window_us;
