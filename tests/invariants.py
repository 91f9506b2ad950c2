"""Invariants every analysed window must satisfy, as SQL checks returning offending rows."""

from __future__ import annotations

# Each query returns the windows (or path rows) that break the invariant; empty = holds.
CHECKS = {
    # cross_rank paths follow their node's rank's ctda edges, and change rank only over a
    # row whose edge_type is 'cross_rank' (the collective that gated it)
    "path is a chain of real edges": """
        SELECT c.run_id, c.rank, c.step, c.method, c.seq
        FROM critical_path c
        JOIN critical_path nxt ON nxt.run_id = c.run_id AND nxt.rank = c.rank AND nxt.step = c.step
             AND nxt.method = c.method AND nxt.seq = c.seq + 1
        LEFT JOIN edges e ON e.run_id = c.run_id AND e.rank = c.node_rank AND e.step = c.step
             AND e.method = if(c.method = 'cross_rank', 'ctda', c.method)
             AND e.src = c.node_id AND e.dst = nxt.node_id AND nxt.node_rank = c.node_rank
        WHERE e.src IS NULL
          AND NOT (c.method = 'cross_rank' AND c.edge_type = 'cross_rank' AND nxt.node_rank <> c.node_rank)""",
    "counted windows move back in time and never overlap": """
        SELECT run_id, rank, step, method, seq FROM (
            SELECT *, lead(counted_start_us) OVER (PARTITION BY run_id, rank, step, method ORDER BY seq) AS next_start
            FROM critical_path)
        WHERE counted_start_us > counted_end_us OR counted_end_us > next_start""",
    "counted time fits inside its window": """
        SELECT run_id, rank, step, method, seq FROM critical_path
        WHERE counted_us < -1e-6 OR counted_us > counted_end_us - counted_start_us + 1e-6""",
    "0 < CPCR <= 1": """
        SELECT run_id, rank, step, method FROM (
            SELECT c.run_id, c.rank, c.step, c.method, sum(c.counted_us) / any_value(w.window_us) AS cpcr
            FROM critical_path c JOIN analysis_windows w USING (run_id, rank, step) GROUP BY ALL)
        WHERE NOT (cpcr > 0 AND cpcr <= 1 + 1e-9)""",
    "per_thread never beats ctda on coverage": """
        SELECT run_id, rank, step FROM (
            SELECT run_id, rank, step,
                   sum(counted_us) FILTER (WHERE method = 'ctda') AS ctda_us,
                   sum(counted_us) FILTER (WHERE method = 'per_thread') AS per_thread_us
            FROM critical_path GROUP BY ALL)
        WHERE per_thread_us > ctda_us + 1e-6""",
    "counted + remainder = step": """
        SELECT run, rank, step, method FROM cpcr_rows
        WHERE abs(path_us + cpu_gap_us + gpu_idle_us + launch_delay_us + between_nodes_us
                  + slack_before_us + slack_after_us - step_us) > 1e-6 * greatest(step_us, 1)""",
    "hotspot self time adds up to path time": """
        SELECT c.run_id, c.rank, c.step, c.method FROM critical_path c
        LEFT JOIN (SELECT run_id, rank, step, method, node_id, sum(self_us) AS self_us
                   FROM path_events GROUP BY ALL) e USING (run_id, rank, step, method, node_id)
        WHERE abs(coalesce(e.self_us, 0) - c.counted_us) > 1e-6""",
}


def broken_invariants(con) -> dict[str, list]:
    """Invariant name -> offending rows, for every invariant that does not hold."""
    from warehouse.reports import find_report

    report = find_report("cpcr")
    con.execute("CREATE OR REPLACE TEMP TABLE cpcr_rows AS " + report.sql.rstrip().rstrip(";"),
                report.bind({}))
    found = {name: con.execute(sql).fetchall() for name, sql in CHECKS.items()}
    return {name: rows[:5] for name, rows in found.items() if rows}
