"""`ctda-sql demo`: why the tool exists, on a real trace.

The default trace is nccl.json.gz from the Holistic Trace Analysis test data (MIT licence,
LICENSE-HTA beside it): a multi-threaded CUDA + NCCL training trace whose backward runs on
the autograd thread. The demo ingests and analyses it, prints the time-summing view, then
hotspots and critical-path coverage for ctda beside per_thread, and writes demo.html and
demo-overlay.json.gz. `--trace FILE` runs it on another trace (the tests use the small CPU
trace recorded by scripts/record_demo_trace.py, data/demo_trace.json.gz).
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import textwrap
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

from ctda_sql.api import Warehouse
from ctda_sql.cli.output import render, table_width
from ctda_sql.core import sqlfiles
from ctda_sql.core.errors import CtdaError

RUN_NAME = "demo"
DEMO_TRACE = "data/nccl.json.gz"
HTML_NAME = "demo.html"
OVERLAY_NAME = "demo-overlay.json.gz"
TOP = 10


def run_demo(db: str | None, out_dir: str | None = None, trace: str | None = None) -> None:
    """Ingest the trace into `db` (a temporary database when None), print the comparison and
    write the report and overlay into `out_dir` (default: the current folder)."""
    out = Path(out_dir or ".")
    if not out.is_dir():
        raise CtdaError(f"{out}: no such folder")
    with ExitStack() as stack:
        trace_path = Path(trace) if trace else stack.enter_context(
            resources.as_file(resources.files("ctda_sql") / DEMO_TRACE))
        db_path = Path(db) if db else _temporary_db(stack)
        wh = stack.enter_context(Warehouse(db_path))
        _ingest_demo(wh, trace_path)
        run_id, run_name = _run_holding(wh, trace_path)
        _print_summary(wh, run_id)
        wh.analyze(run=run_name)
        _print_comparison(wh, run_id)
        _print_advice(wh, run_name)
        _write_files(wh, run_name, out)
        if db is None:
            print("(temporary database, removed on exit; pass --db FILE to keep it)")


def _temporary_db(stack: ExitStack) -> Path:
    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="ctda-demo-"))
    return Path(folder) / "demo.duckdb"


def _ingest_demo(wh: Warehouse, trace: Path) -> None:
    result = wh.ingest([trace], run=RUN_NAME)
    for line in result.loaded:
        print(f"ingested {line}")
    for line in result.skipped:
        print(f"note: {line}")


def _run_holding(wh: Warehouse, trace: Path) -> tuple[int, str]:
    """The run that holds the trace (an earlier ingest may have named it differently)."""
    digest = hashlib.sha256(trace.read_bytes()).hexdigest()
    return wh.sql("SELECT run_id, name FROM traces JOIN runs USING (run_id) WHERE file_sha256 = $d",
                  {"d": digest}).fetchall()[0]


def _print_summary(wh: Warehouse, run_id: int) -> None:
    _print_query(wh, "demo/run_overview.sql", {"run_id": run_id}, "Run")
    _print_query(wh, "demo/top_ops.sql", {"run_id": run_id, "top": TOP},
                 f"Top {TOP} ops by total time (the time-summing view: long, but do they decide step time?)")


def _print_comparison(wh: Warehouse, run_id: int) -> None:
    _print_query(wh, "demo/hotspots_side_by_side.sql", {"run_id": run_id, "top": TOP},
                 "hotspots: counted time on the critical path, ctda (threads linked) beside "
                 "per_thread (threads apart, as other tools do)")
    _print_query(wh, "demo/cpcr_side_by_side.sql", {"run_id": run_id},
                 "cpcr: the share of each step the critical path explains")


def _print_advice(wh: Warehouse, run_name: str) -> None:
    """The top three findings of `advise`, each with the saving the replay predicts."""
    document = wh.advise(run=run_name, top=3, profile_top=0)
    width = table_width(sys.stdout)
    print()
    title = ("what to fix first: the top findings of `ctda-sql advise`, each with the saving the what-if "
             "replay predicts (median over the steps)")
    print(textwrap.fill(title, width) if width else title)
    for place, f in enumerate(document["findings"], start=1):
        saving = (f"saves {f['saving_us'] / 1000:.2f} ms a step ({f['saving_share']:.0%})"
                  if f["saving_us"] is not None else "saving not replayed")
        text = f"{place}. [{f['rule']}] {f['title']}: {saving}. Fix: {f['fix'] or 'none can be named from the trace'}"
        print(textwrap.fill(text, width, subsequent_indent="   ") if width else text)


def _print_query(wh: Warehouse, sql_name: str, params: dict, title: str) -> None:
    result = wh.sql(sqlfiles.load(sql_name), params)
    width = table_width(sys.stdout)
    print()
    print(textwrap.fill(title, width) if width else title)  # the title fits as the table does
    print(render(list(result.columns), result.fetchall(), "table", width))


def _write_files(wh: Warehouse, run_name: str, out: Path) -> None:
    report = wh.export_html(out / HTML_NAME, run=run_name)
    overlay = wh.export_overlay(out / OVERLAY_NAME, run=run_name, methods="all")
    print(f"\nwrote {report['path']}: the report with plots; open it in any browser (no network needed)")
    print(f"wrote {overlay['path']}: the trace with the ctda path marked ({overlay['added']:,} events "
          "added); open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing (Load)")
