-- registered: event_rows
-- writes: events
-- A rank's events for deriving its threads and steps (sql/ingest/threads.sql, steps.sql) in
-- the lake's write task: the columns those statements read, args only where threads.sql
-- reads it (thread names). `event_rows` is the task's Arrow table of the rank's events rows
-- (sql/ingest/event_rows.sql), which goes to Parquet as it is: inserting every column of
-- every row only to read them back cost more than this narrow copy.
INSERT INTO events BY NAME
SELECT run_id, rank, event_id, name, cat, ph, ts_us, dur_us, pid, tid, stream, correlation,
       CASE WHEN ph = 'M' THEN args END AS args
FROM event_rows;
