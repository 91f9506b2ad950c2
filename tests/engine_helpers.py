"""Helpers for engine tests: ingest a built trace, analyze it, read the path back."""

from __future__ import annotations

from pathlib import Path

from ctda_sql.core.connection import connect
from ctda_sql.engine.analyze import AnalysisSettings, analyze
from ctda_sql.ingest.load import ingest
from ctda_sql.testing.tracebuilder import TraceBuilder


def analyzed(builder: TraceBuilder, folder: Path, settings: AnalysisSettings = AnalysisSettings()):
    """A connection to a fresh warehouse holding `builder`'s trace, analyzed with both methods."""
    trace = builder.write(folder / "trace.json")
    con = connect(folder / "engine.duckdb")
    ingest(con, [trace], run_name="scenario", show_progress=False)
    analyze(con, show_progress=False, settings=settings)
    return con


def path_event_names(con, method: str) -> dict[str, float]:
    """Counted self time by event name on the path of `method`."""
    rows = con.execute(
        "SELECT name, sum(self_us) FROM path_events WHERE method = ? GROUP BY name", [method]
    ).fetchall()
    return {name: total for name, total in rows if total > 0}


def path_labels(con, method: str) -> list[str]:
    """Labels (first event names) of the path's nodes in time order."""
    rows = con.execute(
        "SELECT n.label FROM critical_path c JOIN nodes n USING (run_id, rank, step, method, node_id) "
        "WHERE c.method = ? ORDER BY c.seq", [method]
    ).fetchall()
    return [row[0] for row in rows]


def cpcr(con, method: str) -> float:
    return con.execute(
        "SELECT sum(c.counted_us) / any_value(w.window_us) FROM critical_path c "
        "JOIN analysis_windows w USING (run_id, rank, step) WHERE c.method = ?", [method]
    ).fetchone()[0]


def remainder(con, step: int | None = None, method: str = "ctda") -> dict:
    """The cpcr report's row of `step` (the first row when None) for `method`, by column."""
    from ctda_sql.engine.reports import find_report, run_report

    cursor = run_report(con, find_report("cpcr"), {"method": method, **({"step": str(step)} if step else {})})
    columns = [d[0] for d in cursor.description]
    return dict(zip(columns, cursor.fetchone()))
