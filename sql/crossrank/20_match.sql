-- reads: cr_instances, traces, cr_runs
-- makes: _cr_matched(run_id, rank, step, pg, seq, name, nelems, dtype, bytes, group_ranks,
--                   enqueue_us, start_us, end_us, executed_on, cpu_event_id, exec_event_id,
--                   on_channel, unmatched_reason)
-- makes: _cr_offsets(run_id, rank, collectives, clock_offset_us)
-- makes: _cr_p2p_pairs(run_id, rank, pg, seq, step_key, pair)
-- makes: _cr_aligned(run_id, rank, step, pg, seq, name, nelems, dtype, bytes, group_ranks,
--                   enqueue_us, start_us, end_us, executed_on, cpu_event_id, exec_event_id,
--                   on_channel, unmatched_reason, aligned_start_us, aligned_end_us, last_rank,
--                   skew_us, wait_us)
-- makes macro: _cr_checked_instances()
-- writes: traces, cr_instances, collective_instances
-- param: causality_tolerance_us DOUBLE
-- Cross-rank stage 2: match instances across the ranks of their group by (pg, seq), check
-- name and size, estimate each rank's clock offset from the matched ends, and measure the
-- arrival skew of every matched collective in aligned time.

-- A (pg, seq) matches when every rank of the group in the run has it once, under one
-- collective name and (for fixed-size collectives, and a send with its recv) one message
-- size. On a point-to-point channel ('<pg>:<sender>-><receiver>') the sender's send matches
-- the receiver's recv of the same pair (_cr_p2p_pairs below), and a side without one names the
-- step it was looked for in. A macro: the checks run on the calls' order first (for the
-- clock offsets, from collectives only), then on the channels' pairs.
CREATE OR REPLACE TEMP MACRO _cr_checked_instances() AS TABLE
WITH checks AS (
    SELECT run_id, pg, seq,
           count(*) AS instances,
           list_sort(list(DISTINCT rank)) AS ranks,
           list_sort(list(DISTINCT CASE WHEN collective_key(name) IN ('send', 'recv') THEN 'send/recv'
                                        ELSE collective_key(name) END)) AS keys,
           count(DISTINCT nelems) FILTER (WHERE NOT collective_size_varies(name)) AS sizes,
           list_sort(list_distinct(flatten(list(group_ranks)))) AS expected
    FROM cr_instances
    GROUP BY run_id, pg, seq
)
SELECT i.*,
       CASE
           WHEN len(i.group_ranks) < 2 THEN 'no other rank of its group in the run'
           WHEN c.instances > len(c.ranks) THEN 'a rank has this seq twice'
           WHEN c.ranks <> c.expected
               THEN 'no partner on rank ' || array_to_string(list_filter(c.expected, lambda x: NOT list_contains(c.ranks, x)), ', ')
                    || CASE WHEN i.on_channel AND i.step IS NOT NULL THEN ' in step ' || i.step ELSE '' END
           WHEN len(c.keys) > 1 THEN 'collective differs across ranks: ' || array_to_string(c.keys, ' / ')
           WHEN c.sizes > 1 THEN 'message size differs across ranks'
       END AS unmatched_reason
FROM cr_instances AS i
JOIN checks AS c USING (run_id, pg, seq);

CREATE OR REPLACE TEMP TABLE _cr_matched AS SELECT * FROM _cr_checked_instances();

-- Clock offsets: all ranks of a collective finish it together, so a rank whose ends are
-- consistently later runs a later clock. Per matched collective, each rank's end minus the
-- median end of its group; per clock, the median of those, relative to the clock of the
-- run's lowest rank. Ranks that name the same host (host_name) share one clock.
CREATE OR REPLACE TEMP TABLE _cr_offsets AS
WITH clocks AS (
    SELECT run_id, rank, coalesce('host ' || (metadata ->> 'host_name'), 'rank ' || rank) AS clock
    FROM traces WHERE run_id IN (SELECT run_id FROM cr_runs)
),
-- a send may complete before its recv does: only collectives end together
ends AS (
    SELECT run_id, rank, end_us - median(end_us) OVER (PARTITION BY run_id, pg, seq) AS late_us
    FROM _cr_matched WHERE unmatched_reason IS NULL AND collective_key(name) NOT IN ('send', 'recv')
),
per_clock AS (
    SELECT c.run_id, c.clock, median(e.late_us) AS late_us, count(*) AS collectives
    FROM ends AS e JOIN clocks AS c USING (run_id, rank)
    GROUP BY ALL
)
SELECT c.run_id, c.rank, p.collectives,
       p.late_us - first_value(p.late_us) OVER (PARTITION BY c.run_id ORDER BY c.rank) AS clock_offset_us
FROM clocks AS c JOIN per_clock AS p USING (run_id, clock);

UPDATE traces SET clock_offset_us = o.clock_offset_us
FROM (SELECT t.run_id, t.rank, o.clock_offset_us
      FROM traces AS t LEFT JOIN _cr_offsets AS o USING (run_id, rank)
      WHERE t.run_id IN (SELECT run_id FROM cr_runs)) AS o
WHERE traces.run_id = o.run_id AND traces.rank = o.rank;

-- Point-to-point pairs. A send pairs with a recv of its channel made in the same step (the
-- rank's step: a trace that begins a step later, or lost calls, shift no other step's pairs),
-- in order within the step. Where the step's sends and recvs differ in number (a call the
-- trace lost), the step's calls still pair in order, but each recv with the latest send it
-- can (sends outnumber recvs) or each send with the earliest recv it can (recvs outnumber
-- sends) that keeps every pair causal: a recv completes after its send was posted (aligned
-- clocks, $causality_tolerance_us). So the side left without a partner is the one whose
-- neighbours' times say it had none, not the step's last. With nth the order of a side in its
-- step and d the difference in number:
--   more sends: recv nth pairs with send nth + max(0, min over recvs i >= nth of
--     (least(posted_i, i + d) - i)), posted_i the sends posted before recv i completed;
--   more recvs: send nth pairs with recv nth + least(d, max over sends k <= nth of
--     (greatest(done_k + 1, k) - k)), done_k the recvs that completed before send k was posted.
-- Both are monotone: no two sides share a partner. Each side's pair (step, the index on the
-- side that has more) numbers the channel's seq.
CREATE OR REPLACE TEMP TABLE _cr_p2p_pairs AS
WITH sides AS MATERIALIZED (
    SELECT i.run_id, i.rank, i.pg, i.seq,
           coalesce(i.step, -1) AS step_key,  -- (no step: before the first; steps are never negative)
           collective_key(i.name) = 'send' AS is_send,
           i.start_us - coalesce(o.clock_offset_us, 0) AS arrival_us,
           i.end_us - coalesce(o.clock_offset_us, 0) AS done_us,
           row_number() OVER (PARTITION BY i.run_id, i.pg, i.step, collective_key(i.name) = 'send'
                              ORDER BY i.seq) AS nth
    FROM cr_instances AS i
    LEFT JOIN _cr_offsets AS o USING (run_id, rank)
    WHERE i.on_channel
),
counted AS MATERIALIZED (
    SELECT *,
           count(*) FILTER (WHERE is_send) OVER step_sides - count(*) FILTER (WHERE NOT is_send) OVER step_sides
               AS surplus_sends,
           -- sends posted by this one's post, recvs completed by this one's completion (ties included)
           count(*) FILTER (WHERE is_send) OVER (PARTITION BY run_id, pg, step_key ORDER BY arrival_us
                                                  RANGE UNBOUNDED PRECEDING) AS sends_posted,
           count(*) FILTER (WHERE NOT is_send) OVER (PARTITION BY run_id, pg, step_key ORDER BY done_us
                                                      RANGE UNBOUNDED PRECEDING) AS recvs_done
    FROM sides
    WINDOW step_sides AS (PARTITION BY run_id, pg, step_key)
),
sends AS (SELECT * FROM counted WHERE is_send),
recvs AS (SELECT * FROM counted WHERE NOT is_send),
-- more sends: each recv's bound, the sends posted before it completed (at most its nth + d)
recv_bounds AS (
    SELECT r.*, least(coalesce(s.sends_posted, 0), r.nth + r.surplus_sends) - r.nth AS room
    FROM recvs AS r
    ASOF LEFT JOIN sends AS s
        ON s.run_id = r.run_id AND s.pg = r.pg AND s.step_key = r.step_key
       AND s.arrival_us <= r.done_us + $causality_tolerance_us
    WHERE r.surplus_sends > 0
),
-- more recvs: each send's bound, the recvs that completed before it was posted
send_bounds AS (
    SELECT s.*, greatest(coalesce(r.recvs_done, 0) + 1, s.nth) - s.nth AS skip
    FROM sends AS s
    ASOF LEFT JOIN recvs AS r
        ON r.run_id = s.run_id AND r.pg = s.pg AND r.step_key = s.step_key
       AND r.done_us < s.arrival_us - $causality_tolerance_us
    WHERE s.surplus_sends < 0
)
SELECT run_id, rank, pg, seq, step_key,
       nth + greatest(0, min(room) OVER (PARTITION BY run_id, pg, step_key ORDER BY nth
                                        ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)) AS pair
FROM recv_bounds
UNION ALL
SELECT run_id, rank, pg, seq, step_key,
       nth + least(-surplus_sends, max(skip) OVER (PARTITION BY run_id, pg, step_key ORDER BY nth
                                                  ROWS UNBOUNDED PRECEDING))
FROM send_bounds
UNION ALL
SELECT run_id, rank, pg, seq, step_key, nth
FROM counted
WHERE (is_send AND surplus_sends >= 0) OR (NOT is_send AND surplus_sends <= 0);

UPDATE cr_instances SET seq = p.pair_seq
FROM (SELECT run_id, rank, pg, seq,
             dense_rank() OVER (PARTITION BY run_id, pg ORDER BY step_key, pair) AS pair_seq
      FROM _cr_p2p_pairs) AS p
WHERE cr_instances.run_id = p.run_id AND cr_instances.rank = p.rank AND cr_instances.pg = p.pg
  AND cr_instances.seq = p.seq;

CREATE OR REPLACE TEMP TABLE _cr_matched AS SELECT * FROM _cr_checked_instances();

-- Arrival = when a rank's side of the collective began executing, in aligned time. A pair
-- that passed the name and size checks is still no match when a rank finished it before
-- another rank arrived (beyond $causality_tolerance_us): a collective cannot complete
-- before its last participant joins, so those are different calls that happen to share a seq.
-- Of a send/recv pair only the recv cannot complete before the send is posted.
--
-- wait_us is how long the rank's side waited for the last arrival. A side that ended before
-- the last arrival (beyond the same tolerance; after the check above only a send can: NCCL or
-- gloo buffered the message) waited for nothing: 0. skew_us and last_rank stay the arrivals'
-- (the receiver did arrive last, that late): they say when the ranks came, not who waited.
CREATE OR REPLACE TEMP TABLE _cr_aligned AS
WITH aligned AS (
    SELECT m.*, m.start_us - coalesce(o.clock_offset_us, 0) AS aligned_start_us,
           m.end_us - coalesce(o.clock_offset_us, 0) AS aligned_end_us
    FROM _cr_matched AS m
    LEFT JOIN _cr_offsets AS o USING (run_id, rank)
),
causal AS (
    SELECT * REPLACE (
        CASE WHEN unmatched_reason IS NULL
                  AND min(CASE WHEN collective_key(name) <> 'send' THEN aligned_end_us END) OVER g
                      < max(aligned_start_us) OVER g - $causality_tolerance_us
             THEN 'a rank finished it before another arrived: not the same collective'
             ELSE unmatched_reason END AS unmatched_reason)
    FROM aligned
    WINDOW g AS (PARTITION BY run_id, pg, seq)
)
SELECT *,
    -- (of ranks that arrived at one instant, the lowest: the same on every analysis)
    CASE WHEN unmatched_reason IS NULL THEN arg_max(rank, (aligned_start_us, -rank)) OVER g END AS last_rank,
    CASE WHEN unmatched_reason IS NULL THEN max(aligned_start_us) OVER g - min(aligned_start_us) OVER g END AS skew_us,
    CASE WHEN unmatched_reason IS NULL
         THEN CASE WHEN aligned_end_us < max(aligned_start_us) OVER g - $causality_tolerance_us THEN 0.0
                   ELSE max(aligned_start_us) OVER g - aligned_start_us END
    END AS wait_us
FROM causal
WINDOW g AS (PARTITION BY run_id, pg, seq, unmatched_reason IS NULL);

DELETE FROM collective_instances WHERE run_id IN (SELECT run_id FROM cr_runs);

INSERT INTO collective_instances (
    run_id, rank, step, pg, seq, name, nelems, dtype, bytes, group_ranks, enqueue_us, start_us, end_us,
    executed_on, cpu_event_id, exec_event_id, matched, unmatched_reason, aligned_start_us, aligned_end_us,
    last_rank, skew_us, wait_us)
SELECT run_id, rank, step, pg, seq, name, nelems, dtype, bytes, group_ranks, enqueue_us, start_us, end_us,
       executed_on, cpu_event_id, exec_event_id, unmatched_reason IS NULL, unmatched_reason,
       aligned_start_us, aligned_end_us, last_rank, skew_us, wait_us
FROM _cr_aligned;
