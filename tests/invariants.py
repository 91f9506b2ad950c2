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
    # in aligned time: a cross_rank path's rows keep their own ranks' clocks
    "counted windows move back in time and never overlap": """
        SELECT run_id, rank, step, method, seq FROM (
            SELECT c.*, c.counted_end_us - coalesce(t.clock_offset_us, 0) AS aligned_end_us,
                   lead(c.counted_start_us - coalesce(t.clock_offset_us, 0)) OVER (
                       PARTITION BY c.run_id, c.rank, c.step, c.method ORDER BY c.seq) AS next_start
            FROM critical_path c JOIN traces t ON t.run_id = c.run_id AND t.rank = c.node_rank)
        WHERE counted_start_us > counted_end_us OR aligned_end_us > next_start + 1e-6""",
    "counted windows stay inside their step's window": """
        SELECT c.run_id, c.rank, c.step, c.method, c.seq
        FROM critical_path c JOIN analysis_windows w
            ON w.run_id = c.run_id AND w.rank = c.node_rank AND w.step = c.step
        WHERE c.counted_us > 0
          AND (c.counted_start_us < w.start_us - 1e-6 OR c.counted_end_us > w.e2e_end_us + 1e-6)""",
    "no time is counted in two steps": """
        SELECT run_id, node_rank, method, step, seq FROM (
            SELECT *, lead(counted_start_us) OVER (
                PARTITION BY run_id, node_rank, method ORDER BY counted_start_us, counted_end_us) AS next_start
            FROM critical_path WHERE counted_us > 0)
        WHERE counted_end_us > next_start + 1e-6""",
    "every remainder is >= 0": """
        SELECT run, rank, step, method FROM cpcr_rows
        WHERE least(cpu_gap_us, gpu_idle_us, launch_delay_us, between_nodes_us, slack_before_us,
                    slack_after_us, queued_idle_us) < -1e-6""",
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
                  + slack_before_us + slack_after_us + queued_idle_us - step_us) > 1e-6 * greatest(step_us, 1)""",
    # node ids are per rank: a cross_rank path may hold node 4 of two ranks
    "hotspot self time adds up to path time": """
        SELECT c.run_id, c.rank, c.step, c.method FROM critical_path c
        LEFT JOIN (SELECT run_id, rank, step, method, node_rank, node_id, sum(self_us) AS self_us
                   FROM path_events GROUP BY ALL) e USING (run_id, rank, step, method, node_rank, node_id)
        WHERE abs(coalesce(e.self_us, 0) - c.counted_us) > 1e-6""",
}


# Share of each run's ctda path that blocking runtime calls take (syncs, and copy calls whose
# copy blocks the CPU): waiting belongs to the GPU work waited for, not to the call.
BLOCKING_SHARE_SQL = """
    WITH blocking_copy_calls AS (
        SELECT DISTINCT c.run_id, c.rank, c.event_id
        FROM events c JOIN events g
            ON g.run_id = c.run_id AND g.rank = c.rank AND g.correlation = c.correlation
        WHERE is_gpu_work(g.cat) AND is_blocking_copy(g.name) AND NOT is_device_category(c.cat)
    )
    SELECT r.name, coalesce(sum(p.self_us) FILTER (
               WHERE is_blocking_sync_call(p.name) OR b.event_id IS NOT NULL), 0)
           / nullif(sum(p.self_us), 0)
    FROM path_events p JOIN runs r USING (run_id)
    LEFT JOIN blocking_copy_calls b ON b.run_id = p.run_id AND b.rank = p.rank AND b.event_id = p.event_id
    WHERE p.method = 'ctda'
    GROUP BY r.name"""

# Windows holding device work that got no device node.
DEVICE_WITHOUT_NODES_SQL = """
    SELECT w.run_id, w.rank, w.step FROM analysis_windows w
    WHERE EXISTS (SELECT 1 FROM events e WHERE e.run_id = w.run_id AND e.rank = w.rank AND is_gpu_work(e.cat)
                  AND e.ts_us >= w.start_us AND e.ts_us < w.e2e_end_us)
      AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.run_id = w.run_id AND n.rank = w.rank AND n.step = w.step
                      AND n.kind = 'gpu')"""


# issue 31: a device node on the ctda path read as >= 1 ms of launch delay or unexplained
# queued idle while an op on another stream, launched before it, ended within 100 us of its
# start: a missed hand-off
MISSED_HANDOFF_SQL = """
WITH path_gpu AS (
    SELECT c.run_id, c.rank, c.step, c.node_id, n.start_us, n.stream, n.label
    FROM critical_path AS c
    JOIN nodes AS n USING (run_id, rank, step, method, node_id)
    WHERE c.method = 'ctda' AND c.kind = 'gpu' AND NOT n.carry_in
      AND ((c.gap_kind = 'launch_delay' AND c.gap_before_us >= 1000) OR c.queued_gap_us >= 1000)
),
device AS (
    SELECT e.run_id, e.rank, e.stream, e.ts_us, e.ts_us + e.dur_us AS end_us, min(l.ts_us) AS launch_us
    FROM events AS e
    LEFT JOIN events AS l ON l.run_id = e.run_id AND l.rank = e.rank AND l.correlation = e.correlation
        AND is_runtime_category(l.cat)
    WHERE e.ph = 'X' AND is_gpu_work(e.cat)
    GROUP BY ALL
)
SELECT DISTINCT r.name, p.rank, p.step, p.label
FROM path_gpu AS p
JOIN runs AS r USING (run_id)
JOIN device AS first ON first.run_id = p.run_id AND first.rank = p.rank AND first.stream = p.stream
    AND first.ts_us = p.start_us
JOIN device AS other ON other.run_id = p.run_id AND other.rank = p.rank AND other.stream <> p.stream
    AND other.end_us <= p.start_us AND other.end_us >= p.start_us - 100
    AND (other.launch_us IS NULL OR first.launch_us IS NULL OR other.launch_us < first.launch_us)
"""


def hotspots_kept(con, fixed_gaps_us=(15.0, 100.0)) -> dict[str, dict[float, int]]:
    """Runs whose top-10 hotspots keep fewer than 8 names (or all, when fewer) between the
    default analysis and one with each fixed hand-off tolerance; the default is restored."""
    from ctda_sql.engine.analyze import AnalysisSettings, analyze

    default = top_names(con)
    unstable: dict[str, dict[float, int]] = {}
    try:
        for gap in fixed_gaps_us:
            analyze(con, show_progress=False, settings=AnalysisSettings(wait_gap_us=gap))
            for run, names in top_names(con).items():
                kept = len(set(names) & set(default.get(run, [])))
                if kept < min(8, len(names)):
                    unstable.setdefault(run, {})[gap] = kept
    finally:
        analyze(con, show_progress=False)
    return unstable


def top_names(con, top: int = 10, method: str = "ctda") -> dict[str, list[str]]:
    """Run name -> the names of its top hotspots by counted self time."""
    rows = con.execute(
        "SELECT run, list(name ORDER BY us DESC)[1:?] FROM ("
        "  SELECT r.name AS run, p.name, sum(p.self_us) AS us FROM path_events p JOIN runs r USING (run_id)"
        "  WHERE p.method = ? GROUP BY r.name, p.name) GROUP BY run", [top, method]).fetchall()
    return dict(rows)


def create_cpcr_rows(con) -> None:
    """The cpcr report's rows for every window, as the temp table cpcr_rows."""
    from ctda_sql.engine.reports import find_report

    report = find_report("cpcr")
    con.execute("CREATE OR REPLACE TEMP TABLE cpcr_rows AS " + report.sql.rstrip().rstrip(";"),
                report.bind({}))


def broken_invariants(con) -> dict[str, list]:
    """Invariant name -> offending rows, for every invariant that does not hold."""
    create_cpcr_rows(con)
    found = {name: con.execute(sql).fetchall() for name, sql in CHECKS.items()}
    return {name: rows[:5] for name, rows in found.items() if rows}
