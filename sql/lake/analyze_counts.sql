-- Windows, ranks and nodes the lake holds for the runs an analyze wrote, for its summary
-- line. Parameter: run_ids (the runs analysed).
SELECT
    (SELECT count(*) FROM analysis_windows WHERE list_contains($run_ids, run_id)) AS windows,
    (SELECT count(DISTINCT (run_id, rank)) FROM analysis_windows WHERE list_contains($run_ids, run_id)) AS ranks,
    (SELECT count(*) FROM nodes WHERE list_contains($run_ids, run_id)) AS nodes;
