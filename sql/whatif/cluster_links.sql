-- reads: wi_windows, collective_instances, whatif_steps, runs
-- registered: wi_cluster_transfers
-- writes: whatif_cluster_links
-- makes: wi_cluster_link_rows(run, rank, step, link, collectives, busy_us, share_of_step, run_id)
-- param: scenario VARCHAR
-- whatif --cluster: the link that limited each collective (the one busy longest while its
-- flows ran), summed per scenario, rank, step and link (wi_cluster_transfers from
-- warehouse/whatif/cluster.py; the steps' predicted times from whatif_steps). The table and its
-- columns are described in sql/schema/whatif.sql.
DELETE FROM whatif_cluster_links WHERE scenario = $scenario
    AND (run_id, rank, step) IN (SELECT run_id, rank, step FROM wi_windows WHERE reported);

CREATE OR REPLACE TEMP TABLE wi_cluster_link_rows AS
SELECT r.name AS run, c.rank, c.step, t.link, count(*) AS collectives, round(sum(t.busy_us), 3) AS busy_us,
       round(sum(t.busy_us) / any_value(s.predicted_us), 4) AS share_of_step, c.run_id
FROM collective_instances AS c
JOIN wi_cluster_transfers AS t USING (run_id, pg, seq)
JOIN wi_windows AS w ON w.run_id = c.run_id AND w.rank = c.rank AND w.step = c.step AND w.reported
JOIN whatif_steps AS s ON s.scenario = $scenario AND s.run_id = c.run_id AND s.rank = c.rank AND s.step = c.step
JOIN runs AS r ON r.run_id = c.run_id
WHERE t.link <> ''
GROUP BY r.name, c.run_id, c.rank, c.step, t.link;

INSERT INTO whatif_cluster_links
SELECT $scenario, run_id, rank, step, link, collectives, busy_us, share_of_step FROM wi_cluster_link_rows;
