-- The cr_kernels statement of sql/crossrank/10_instances.sql as it was at 4aa6593, before issue
-- 32 replaced its join of every NCCL kernel with every call of its launch's thread with
-- positions from one ordered pass.
-- tests/engine/test_result_digest.py runs it on the same temp tables as the new statement and
-- compares the rows. Verbatim but for the table's name: do not edit it to follow the engine.
CREATE OR REPLACE TEMP TABLE old_cr_kernels AS
WITH kernels AS (
    SELECT g.run_id, g.rank, g.event_id, g.name, g.ts_us, g.end_us, g.args,
           l.pid AS launch_pid, l.tid AS launch_tid, l.ts_us AS launch_ts_us
    FROM events AS g
    LEFT JOIN events AS l
        ON l.run_id = g.run_id AND l.rank = g.rank AND l.correlation = g.correlation
       AND l.ph = 'X' AND is_runtime_category(l.cat)
    WHERE g.run_id IN (SELECT run_id FROM cr_runs) AND g.ph = 'X' AND is_gpu_work(g.cat)
      AND (starts_with(g.name, 'ncclKernel') OR starts_with(g.name, 'ncclDevKernel'))
)
SELECT k.*, c.event_id AS call_event_id
FROM kernels AS k
LEFT JOIN cr_calls AS c
    ON c.run_id = k.run_id AND c.rank = k.rank AND c.pid = k.launch_pid AND c.tid = k.launch_tid
   AND k.launch_ts_us BETWEEN c.ts_us AND c.end_us;
