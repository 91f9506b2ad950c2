-- reads: cp_windows, cp_nodes, cp_nested_windows, analysis_windows, cp_methods, critical_path
-- makes: rows(windows, ranks, nodes, nested, paths)
-- The figures of analyze's summary, read from the stages' tables right after they ran: the
-- windows analysed, their ranks, the graph's nodes, annotations nested in a window of the
-- same prefix, and per method analysed its windows' summed CPCR with their count (the mean
-- is sum / count, so a lake adds up its rank tasks' figures: warehouse/engine/analyze.py).
SELECT
    (SELECT count(*) FROM cp_windows) AS windows,
    (SELECT count(DISTINCT (run_id, rank)) FROM cp_windows) AS ranks,
    (SELECT count(*) FROM cp_nodes) AS nodes,
    (SELECT nested_count FROM cp_nested_windows) AS nested,
    (
        SELECT coalesce(list({'method': method, 'cpcr_sum': cpcr_sum, 'windows': path_windows}), [])
        FROM (
            SELECT c.method, sum(p.path_us / x.window_us) AS cpcr_sum, count(*) AS path_windows
            FROM (
                SELECT method, run_id, rank, step, sum(counted_us) AS path_us
                FROM critical_path
                WHERE (run_id, rank, step) IN (SELECT run_id, rank, step FROM cp_windows)
                GROUP BY ALL
            ) AS p
            JOIN analysis_windows AS x USING (run_id, rank, step)
            JOIN cp_methods AS c USING (method)
            GROUP BY c.method
        )
    ) AS paths;
