-- reads: cp_edges, cp_nodes, cp_windows, cp_wait_ends
-- makes: cp_methods(method)
-- makes: cp_method_edges(method, run_id, rank, step, src, dst, type, inferred, effective_end_us)
-- makes: _cp_choice(method, run_id, rank, step, node_id, pred_id, pred_type)
-- makes: cp_window_extent(run_id, rank, step, name, start_us, end_us, e2e_end_us)
-- makes: _cp_walk(method, run_id, rank, step, node_id, edge_to_next, seq)
-- makes: cp_counted(method, run_id, rank, step, node_id, edge_to_next, seq, kind, start_us, end_us,
--                   carry_in, next_node, next_kind, pred_type, window_start_us, e2e_end_us,
--                   raw_start_us, raw_end_us, launches_next, counted_start_us, counted_end_us)
-- param: methods VARCHAR[]
-- Stage 5: per method, each node's chosen predecessor, the backtracked path from the node
-- that ends last, and each path node's counted window.

CREATE OR REPLACE TEMP TABLE cp_methods AS
SELECT unnest($methods::VARCHAR[]) AS method;

-- per_thread: the same nodes without cross-thread edges.
CREATE OR REPLACE TEMP TABLE cp_method_edges AS
SELECT m.method, e.*
FROM cp_methods AS m
CROSS JOIN cp_edges AS e
WHERE NOT (m.method = 'per_thread' AND e.type = 'cross_thread');

-- From a CPU node after a blocking sync that waited on still-running GPU work: the GPU
-- predecessor that ends last; else the CPU predecessor that ends last. From a GPU node:
-- the predecessor with the latest effective end (GPU end, or end of the first launch).
CREATE OR REPLACE TEMP TABLE _cp_choice AS
SELECT method, run_id, rank, step, dst AS node_id, src AS pred_id, type AS pred_type
FROM (
    SELECT e.*, row_number() OVER (
        PARTITION BY e.method, e.run_id, e.rank, e.step, e.dst
        ORDER BY (d.kind = 'cpu' AND e.type = 'sync') DESC, e.effective_end_us DESC,
                 (s.kind = 'gpu') DESC, e.src DESC) AS preference
    FROM cp_method_edges AS e
    JOIN cp_nodes AS d ON d.run_id = e.run_id AND d.rank = e.rank AND d.step = e.step AND d.node_id = e.dst
    JOIN cp_nodes AS s ON s.run_id = e.run_id AND s.rank = e.rank AND s.step = e.step AND s.node_id = e.src
)
WHERE preference = 1;

-- End-to-end extent of every window: a step ends where the next one starts (the last one
-- where its device work ends, sql/ingest/steps.sql); an annotation window runs on to the end
-- of the device work launched inside it.
CREATE OR REPLACE TEMP TABLE cp_window_extent AS
SELECT w.run_id, w.rank, w.step, w.name, w.start_us, w.end_us,
       CASE WHEN w.extends_to_device_end THEN greatest(w.end_us, coalesce(max(n.end_us), w.end_us))
            ELSE w.end_us END AS e2e_end_us
FROM cp_windows AS w
LEFT JOIN cp_nodes AS n
    ON n.run_id = w.run_id AND n.rank = w.rank AND n.step = w.step AND n.kind = 'gpu' AND NOT n.carry_in
GROUP BY w.run_id, w.rank, w.step, w.name, w.start_us, w.end_us, w.extends_to_device_end;

CREATE OR REPLACE TEMP TABLE _cp_walk AS
WITH RECURSIVE
starts AS (
    -- the node that ends last, GPU work queued past the end of the window aside (it belongs
    -- to the next step, as carry-in); CPU nodes all start inside their window
    SELECT method, run_id, rank, step, node_id
    FROM (
        SELECT m.method, n.run_id, n.rank, n.step, n.node_id,
               row_number() OVER (PARTITION BY m.method, n.run_id, n.rank, n.step
                                  ORDER BY (n.kind = 'cpu' OR n.start_us < x.e2e_end_us) DESC, n.end_us DESC,
                                           (n.kind = 'gpu') DESC, n.node_id DESC) AS latest
        FROM cp_nodes AS n
        JOIN cp_window_extent AS x USING (run_id, rank, step)
        CROSS JOIN cp_methods AS m
    )
    WHERE latest = 1
),
walk AS (
    SELECT method, run_id, rank, step, node_id, 1 AS depth, NULL::VARCHAR AS edge_to_next
    FROM starts
    UNION ALL
    SELECT w.method, w.run_id, w.rank, w.step, c.pred_id, w.depth + 1, c.pred_type
    FROM walk AS w
    JOIN _cp_choice AS c
        ON c.method = w.method AND c.run_id = w.run_id AND c.rank = w.rank AND c.step = w.step
       AND c.node_id = w.node_id
)
SELECT method, run_id, rank, step, node_id, edge_to_next,
       max(depth) OVER (PARTITION BY method, run_id, rank, step) - depth + 1 AS seq
FROM walk;

-- Counted windows. A CPU node followed on the path by its own GPU node counts up to the end
-- of that node's first launch; a CPU node reached through a sync counts from the end of the
-- wait; carry-in counts from the window start. Windows are then made disjoint going back
-- from the last node: each ends where the next one starts.
CREATE OR REPLACE TEMP TABLE cp_counted AS
WITH path AS (
    SELECT p.*, n.kind, n.start_us, n.end_us, n.carry_in,
           lead(p.node_id) OVER w AS next_node, lead(n.kind) OVER w AS next_kind,
           c.pred_type, x.start_us AS window_start_us, x.e2e_end_us
    FROM _cp_walk AS p
    JOIN cp_nodes AS n USING (run_id, rank, step, node_id)
    JOIN cp_window_extent AS x USING (run_id, rank, step)
    LEFT JOIN _cp_choice AS c USING (method, run_id, rank, step, node_id)
    WINDOW w AS (PARTITION BY p.method, p.run_id, p.rank, p.step ORDER BY p.seq)
),
raw AS (
    SELECT p.*,
        greatest(p.window_start_us, CASE
            WHEN p.kind = 'cpu' AND p.pred_type = 'sync' THEN greatest(p.start_us, coalesce(wait.wait_end_us, p.start_us))
            ELSE p.start_us END) AS raw_start_us,
        least(p.e2e_end_us, CASE
            WHEN p.kind = 'cpu' AND p.next_kind = 'gpu' AND call.effective_end_us IS NOT NULL
                THEN call.effective_end_us
            ELSE p.end_us END) AS raw_end_us,
        call.effective_end_us IS NOT NULL AS launches_next
    FROM path AS p
    LEFT JOIN cp_edges AS call
        ON call.run_id = p.run_id AND call.rank = p.rank AND call.step = p.step AND call.type = 'call'
       AND call.src = p.node_id AND call.dst = p.next_node
    LEFT JOIN cp_wait_ends AS wait
        ON wait.run_id = p.run_id AND wait.rank = p.rank AND wait.step = p.step AND wait.node_id = p.node_id
),
disjoint AS (
    SELECT *,
        min(least(raw_start_us, raw_end_us)) OVER (
            PARTITION BY method, run_id, rank, step ORDER BY seq
            ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS counted_start_us
    FROM raw
)
SELECT *,
    least(raw_end_us, coalesce(lead(counted_start_us) OVER (
        PARTITION BY method, run_id, rank, step ORDER BY seq), raw_end_us)) AS counted_end_us
FROM disjoint;
