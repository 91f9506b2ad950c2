-- Completion: run names, newest first.
SELECT name FROM runs ORDER BY run_id DESC LIMIT 200;
