-- One rank's events as the cross-rank stages (sql/crossrank/10_instances.sql) read them, for
-- the lake's per-run cross-rank task: complete ('X') events that are collective calls or
-- executions (c10d::*, record_param_comms, nccl*, gloo:*), and the runtime calls that launched
-- an NCCL kernel (the stages join a kernel to its launch by correlation and use no other
-- runtime call), with the columns those stages use. A run's other events stay in their
-- files: loading every event of every rank was 75% of the task on 16 ranks x 100k events,
-- and every runtime call still 60% at 16 x 480k. tests/test_lake.py checks that the lake's
-- cross-rank results equal the database's.
-- Parameters: rank, files (the rank's events files).
INSERT INTO events BY NAME
SELECT run_id, CAST($rank AS INTEGER) AS rank, event_id, name, cat, ph, ts_us, dur_us, pid, tid, correlation, args
FROM read_parquet($files, union_by_name = true, hive_partitioning = false)
WHERE ph = 'X'
  AND (name = 'record_param_comms' OR starts_with(name, 'c10d::')
       OR starts_with(name, 'nccl') OR starts_with(name, 'gloo:')
       OR (is_runtime_category(cat)
           AND correlation IN (
               -- a second scan of two narrow columns: cheaper than reading every runtime
               -- call's args
               SELECT correlation
               FROM read_parquet($files, union_by_name = true, hive_partitioning = false)
               WHERE (starts_with(name, 'ncclKernel') OR starts_with(name, 'ncclDevKernel'))
                 AND correlation IS NOT NULL)))
ORDER BY event_id;
