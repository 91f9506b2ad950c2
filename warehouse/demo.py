"""`ctda-sql demo`: ingest the bundled PyTorch trace and print what the warehouse holds.

The trace was recorded by scripts/record_demo_trace.py (a small MLP training loop).
"""

from __future__ import annotations

import hashlib
import tempfile
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

from . import sqlfiles
from .connection import connect
from .ingest import ingest
from .output import render

# The critical-path engine lands separately; until then the demo stops at the summary.
try:
    from .analyze import analyze
except ImportError:
    analyze = None

RUN_NAME = "demo"
DEMO_TRACE = "data/demo_trace.json.gz"
TOP_OPS = 10


def run_demo(db: str | None) -> None:
    """Ingest the bundled trace into `db` (a temporary database when None) and summarise it."""
    with ExitStack() as stack:
        trace = stack.enter_context(resources.as_file(resources.files("warehouse") / DEMO_TRACE))
        db_path = Path(db) if db else _temporary_db(stack)
        con = connect(db_path)
        stack.callback(con.close)
        _ingest_demo(con, trace)
        run_id = _run_holding(con, trace)
        _print_summary(con, run_id)
        _print_critical_path(con, run_id)
        if db is None:
            print("(temporary database, removed on exit; pass --db FILE to keep it)")


def _temporary_db(stack: ExitStack) -> Path:
    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="ctda-demo-"))
    return Path(folder) / "demo.duckdb"


def _ingest_demo(con, trace: Path) -> None:
    result = ingest(con, [trace], run_name=RUN_NAME, show_progress=False)
    for line in result.loaded:
        print(f"ingested {line}")
    for line in result.skipped:
        print(f"note: {line}")


def _run_holding(con, trace: Path) -> int:
    """The run that holds the demo trace (an earlier ingest may have named it differently)."""
    digest = hashlib.sha256(trace.read_bytes()).hexdigest()
    return con.execute("SELECT run_id FROM traces WHERE file_sha256 = ?", [digest]).fetchone()[0]


def _print_summary(con, run_id: int) -> None:
    _print_query(con, "demo/run_overview.sql", {"run_id": run_id}, "Run")
    _print_query(con, "demo/top_ops.sql", {"run_id": run_id, "top": TOP_OPS},
                 f"Top {TOP_OPS} ops by total time (time-summing view)")


def _print_query(con, sql_name: str, params: dict, title: str) -> None:
    cursor = con.execute(sqlfiles.load(sql_name), params)
    columns = [d[0] for d in cursor.description]
    print(f"\n{title}")
    print(render(columns, cursor.fetchall(), "table"))


# ---- critical path (once warehouse.analyze exists) --------------------------------------

def _print_critical_path(con, run_id: int) -> None:
    if analyze is None:
        print("\nCritical-path analysis is not available in this build yet "
              "(warehouse.analyze is missing); hotspots and cpcr will appear here.")
        return
    run_name = con.execute("SELECT name FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
    analyze(con, run=run_name, method="all", window_prefix=None, show_progress=False)
    for report_name in ("hotspots", "cpcr"):
        _print_report(con, report_name, run_name)


def _print_report(con, report_name: str, run_name: str) -> None:
    from .reports import find_report, run_report

    report = find_report(report_name)
    wanted = {"run": run_name, "top": str(TOP_OPS)}
    given = {p.name: wanted[p.name] for p in report.params if p.name in wanted}
    cursor = run_report(con, report, given)
    print(f"\n{report_name}: {report.description}")
    print(render([d[0] for d in cursor.description], cursor.fetchall(), "table"))
