-- reads: critical_path, _adv_windows
-- makes: rows(rule, title, fix, path_us, windows, ranks, occurrences, top_events, scale_names,
--             scale_categories, scale_factors, scale_ranks, bandwidth_scale, drop_syncs,
--             not_replayable, detail)
-- rule: unexplained_idle. A device sat idle with work queued, for a cause the trace does not show
-- (events missing from it, or a wait on a rank or process not in it): named, no fix, no saving.
-- Its row is a finding (warehouse/advice/advise.py FINDING_COLUMNS), or there is none.
WITH idle AS (
    SELECT c.run_id, c.rank, c.step, sum(coalesce(c.queued_gap_us, 0) + coalesce(c.queued_idle_us, 0)) AS idle_us
    FROM critical_path AS c
    SEMI JOIN _adv_windows AS w USING (run_id, rank, step)
    WHERE c.method = 'ctda'
    GROUP BY ALL
    HAVING idle_us > 0
)
SELECT 'unexplained_idle' AS rule,
       'The device waits with work queued, for a cause the trace does not show' AS title,
       NULL::VARCHAR AS fix,
       sum(idle_us) AS path_us, count(*) AS windows, list(DISTINCT rank ORDER BY rank) AS ranks,
       count(*) AS occurrences, []::VARCHAR[] AS top_events,
       []::VARCHAR[] AS scale_names, []::VARCHAR[] AS scale_categories, []::DOUBLE[] AS scale_factors,
       []::VARCHAR[] AS scale_ranks, NULL::DOUBLE AS bandwidth_scale, false AS drop_syncs,
       'the wait is on something outside the trace: profile the other ranks and processes, or record with '
           || 'more activities, to see what held the device' AS not_replayable,
       NULL::VARCHAR AS detail
FROM idle
HAVING count(*) > 0;
