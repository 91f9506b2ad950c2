-- Reports: every run's name and whether `analyze` has written its critical paths,
-- so a report on an unknown or unanalysed run says so instead of returning no rows.
SELECT r.name,
       EXISTS (SELECT 1 FROM analysis_windows AS w WHERE w.run_id = r.run_id) AS analysed
FROM runs AS r
ORDER BY r.run_id;
