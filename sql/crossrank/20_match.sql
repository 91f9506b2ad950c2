-- Cross-rank stage 2: match instances across the ranks of their group by (pg, seq), check
-- name and size, estimate each rank's clock offset from the matched ends, and measure the
-- arrival skew of every matched collective in aligned time.

-- A (pg, seq) matches when every rank of the group in the run has it once, under one
-- collective name and (for fixed-size collectives) one message size. On a point-to-point
-- channel ('<pg>:<sender>-><receiver>') the sender's send matches the receiver's recv.
CREATE OR REPLACE TEMP TABLE cr_group_checks AS
SELECT run_id, pg, seq,
       count(*) AS instances,
       list_sort(list(DISTINCT rank)) AS ranks,
       max(len(group_ranks)) AS group_rank_count,
       list_sort(list(DISTINCT CASE WHEN collective_key(name) IN ('send', 'recv') THEN 'send/recv'
                                    ELSE collective_key(name) END)) AS keys,
       count(DISTINCT nelems) FILTER (WHERE NOT collective_size_varies(name)) AS sizes,
       list_sort(list_distinct(flatten(list(group_ranks)))) AS expected
FROM cr_instances
GROUP BY run_id, pg, seq;

CREATE OR REPLACE TEMP TABLE cr_matched AS
SELECT i.*,
       CASE
           WHEN len(i.group_ranks) < 2 THEN 'no other rank of its group in the run'
           WHEN c.instances > len(c.ranks) THEN 'a rank has this seq twice'
           WHEN c.ranks <> c.expected
               THEN 'no partner on rank ' || array_to_string(list_filter(c.expected, lambda x: NOT list_contains(c.ranks, x)), ', ')
           WHEN len(c.keys) > 1 THEN 'collective differs across ranks: ' || array_to_string(c.keys, ' / ')
           WHEN c.sizes > 1 THEN 'message size differs across ranks'
       END AS unmatched_reason
FROM cr_instances AS i
JOIN cr_group_checks AS c USING (run_id, pg, seq);

-- Clock offsets: all ranks of a collective finish it together, so a rank whose ends are
-- consistently later runs a later clock. Per matched collective, each rank's end minus the
-- median end of its group; per clock, the median of those, relative to the clock of the
-- run's lowest rank. Ranks that name the same host (host_name) share one clock.
CREATE OR REPLACE TEMP TABLE cr_offsets AS
WITH clocks AS (
    SELECT run_id, rank, coalesce('host ' || (metadata ->> 'host_name'), 'rank ' || rank) AS clock
    FROM traces WHERE run_id IN (SELECT run_id FROM cr_runs)
),
-- a send may complete before its recv does: only collectives end together
ends AS (
    SELECT run_id, rank, end_us - median(end_us) OVER (PARTITION BY run_id, pg, seq) AS late_us
    FROM cr_matched WHERE unmatched_reason IS NULL AND collective_key(name) NOT IN ('send', 'recv')
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
      FROM traces AS t LEFT JOIN cr_offsets AS o USING (run_id, rank)
      WHERE t.run_id IN (SELECT run_id FROM cr_runs)) AS o
WHERE traces.run_id = o.run_id AND traces.rank = o.rank;

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
CREATE OR REPLACE TEMP TABLE cr_aligned AS
WITH aligned AS (
    SELECT m.*, m.start_us - coalesce(o.clock_offset_us, 0) AS aligned_start_us,
           m.end_us - coalesce(o.clock_offset_us, 0) AS aligned_end_us
    FROM cr_matched AS m
    LEFT JOIN cr_offsets AS o USING (run_id, rank)
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
    CASE WHEN unmatched_reason IS NULL THEN arg_max(rank, aligned_start_us) OVER g END AS last_rank,
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
FROM cr_aligned;
