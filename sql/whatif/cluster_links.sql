-- reads: wi_windows, collective_instances, whatif_steps, runs
-- registered: wi_cluster_transfers
-- makes: whatif_cluster_links(scenario, run_id, rank, step, link, collectives, busy_us,
--                             share_of_step)
-- makes: wi_cluster_link_rows(run, rank, step, link, collectives, busy_us, share_of_step, run_id)
-- param: scenario VARCHAR
-- whatif --cluster: the link that limited each collective (the one busy longest while its
-- flows ran), summed per scenario, rank, step and link (wi_cluster_transfers from
-- warehouse/whatif/cluster.py; the steps' predicted times from whatif_steps).
CREATE TABLE IF NOT EXISTS whatif_cluster_links (
    scenario VARCHAR NOT NULL,
    run_id INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    step BIGINT NOT NULL,
    link VARCHAR NOT NULL,
    collectives BIGINT NOT NULL,
    busy_us DOUBLE NOT NULL,
    share_of_step DOUBLE
);
COMMENT ON TABLE whatif_cluster_links IS 'whatif --cluster: the links that limited the collectives of each step (the link each collective kept busy longest), per scenario, run, rank and step';
COMMENT ON COLUMN whatif_cluster_links.scenario IS 'scenario name, as in whatif_steps';
COMMENT ON COLUMN whatif_cluster_links.run_id IS 'runs.run_id';
COMMENT ON COLUMN whatif_cluster_links.rank IS 'rank whose step holds the collectives';
COMMENT ON COLUMN whatif_cluster_links.step IS 'step (ProfilerStep number)';
COMMENT ON COLUMN whatif_cluster_links.link IS 'the link and its direction: devN up|down (a device to its host switch), hostN up|down (a host to the network), leafN up|down (a leaf to the spine), shared (the one shared link)';
COMMENT ON COLUMN whatif_cluster_links.collectives IS 'collectives of the step that this link limited';
COMMENT ON COLUMN whatif_cluster_links.busy_us IS 'time the link was busy carrying those collectives: bytes through it / its bandwidth, µs';
COMMENT ON COLUMN whatif_cluster_links.share_of_step IS 'busy_us / the predicted step (whatif_steps.predicted_us)';

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
