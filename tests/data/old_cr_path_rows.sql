-- The _cr_path_rows statement of sql/crossrank/30_path.sql as it was at 4aa6593, before issue 32
-- replaced its join of every hop with every path row of its rank's step.
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_cr_path_rows AS
WITH clipped AS (
    SELECT h.run_id, h.step, h.hop, h.rank AS node_rank, p.seq AS rank_seq, p.node_id, p.kind,
           p.edge_type, p.gap_kind, p.counted_us,
           greatest(p.counted_start_us, h.lower_us) AS counted_start_us,
           least(p.counted_end_us, h.upper_us) AS counted_end_us,
           p.counted_end_us - p.counted_start_us AS full_window_us
    FROM cr_hops AS h
    JOIN _cr_rank_paths AS p
        ON p.run_id = h.run_id AND p.rank = h.rank AND p.step = h.step
       AND p.counted_end_us >= h.lower_us AND p.counted_start_us <= h.upper_us
)
SELECT c.*, w.offset_us,
       CASE WHEN full_window_us > 0 THEN (counted_end_us - counted_start_us) / full_window_us ELSE 1 END AS kept_share
FROM clipped AS c
JOIN _cr_windows AS w ON w.run_id = c.run_id AND w.rank = c.node_rank AND w.step = c.step
WHERE counted_end_us > counted_start_us OR full_window_us = 0;
