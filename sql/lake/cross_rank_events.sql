-- reads: events
-- makes: rows(run_id, rank, event_id, name, cat, ph, ts_us, dur_us, pid, tid, correlation, args)
-- One rank's events as the cross-rank stages (sql/crossrank/10_instances.sql) read them, for
-- the lake's per-run cross-rank task: complete ('X') events that are collective calls or
-- executions (c10d::*, record_param_comms, nccl*, gloo:*), and the runtime calls that launched
-- an NCCL kernel (the stages join a kernel to its launch by correlation and use no other
-- runtime call), with the columns those stages use. Each rank's analyze task selects them
-- from the events it has loaded and hands them to the run's task as its result, so that task
-- need not read them back from every rank's events files.
-- tests/lake/test_lake.py checks that the lake's cross-rank results equal the database's.
SELECT run_id, rank, event_id, name, cat, ph, ts_us, dur_us, pid, tid, correlation, args
FROM events
WHERE ph = 'X'
  AND (name = 'record_param_comms' OR starts_with(name, 'c10d::')
       OR starts_with(name, 'nccl') OR starts_with(name, 'gloo:')
       OR (is_runtime_category(cat)
           AND correlation IN (
               SELECT correlation FROM events
               WHERE (starts_with(name, 'ncclKernel') OR starts_with(name, 'ncclDevKernel'))
                 AND correlation IS NOT NULL)))
ORDER BY event_id;
