"""Golden tables: every saved report, `report --list` and the demo's tables as a user sees
them in an 80- and a 120-column terminal, on the bundled NCCL trace (ingested and analysed
once per session). A change to what they print shows here as a diff to review.

Regenerate after an intended change: CTDA_UPDATE_SNAPSHOTS=1 python -m pytest -q tests/unit/test_output_snapshots.py
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from importlib import resources
from pathlib import Path

import pytest

from ctda_sql import Warehouse
from ctda_sql.cli.output import write_cursor
from ctda_sql.engine.reports import bundled_reports, run_report

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots"
UPDATE = os.environ.get("CTDA_UPDATE_SNAPSHOTS") == "1"
WIDTHS = (80, 120)
RUN = "demo"
# reports that cannot run on their defaults alone
REPORT_PARAMS = {"run_diff": {"run_a": RUN, "run_b": RUN, "step_a": 4, "step_b": 5},
                 "path_diff": {"run_a": RUN, "run_b": RUN}}
# ingest time changes from one session to the next: masked, keeping its width
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?")


@pytest.fixture(scope="session")
def demo_warehouse(tmp_path_factory):
    db = tmp_path_factory.mktemp("snapshots") / "demo.duckdb"
    trace = resources.files("ctda_sql") / "data/nccl.json.gz"
    with resources.as_file(trace) as path, Warehouse(db) as wh:
        wh.ingest([path], run=RUN)
        wh.analyze(run=RUN)
    with Warehouse(db, read_only=True) as wh:
        wh.con.execute("SET threads = 1")  # sums in one order: the last digits do not vary
        yield wh


def _masked(text: str) -> str:
    return _TIMESTAMP.sub(lambda m: "X" * len(m.group(0)), text)


def _check(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    text = _masked(text).rstrip("\n") + "\n"
    if UPDATE or not path.exists():
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"{path.name} was missing and has been written: review it and commit it")
        return
    assert text == path.read_text(encoding="utf-8"), (
        f"{path.name} differs; if the change is intended, run CTDA_UPDATE_SNAPSHOTS=1 pytest {__file__}")


def _fits(text: str, width: int) -> None:
    from wcwidth import wcswidth

    assert max(wcswidth(line) for line in text.splitlines()) <= width


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", sorted(bundled_reports()))
def test_report_table(demo_warehouse, name, width):
    report = bundled_reports()[name]
    out = io.StringIO()
    write_cursor(run_report(demo_warehouse.con, report, REPORT_PARAMS.get(name, {})), "table", out, width)
    _fits(out.getvalue(), width)
    _check(f"report-{name}-{width}", f"$ ctda-sql report {name} --max-width {width}\n{out.getvalue()}")


def _header_cells(text: str) -> list[str]:
    """The column names a table's header shows (its first line of cells)."""
    return [cell.strip() for cell in text.splitlines()[1].split("│")[1:-1]]


@pytest.mark.parametrize("name", sorted(bundled_reports()))
def test_every_report_declares_key_columns_and_shows_them_at_80_columns(demo_warehouse, name):
    # at 80 columns the columns holding the answer were hidden: collective_skew's last_rank and
    # skew_us, stragglers' flag and z-score, temporal_breakdown's percentages
    report = bundled_reports()[name]
    cursor = run_report(demo_warehouse.con, report, REPORT_PARAMS.get(name, {}))
    columns = [d[0] for d in cursor.description]
    assert report.keys, f"{name}: add a `-- key: COLUMN, ...` line to its header (the columns holding its answer)"
    assert set(report.keys) <= set(columns), f"{name}: its -- key: line names a column it does not return"
    out = io.StringIO()
    write_cursor(cursor, "table", out, 80)
    assert set(report.keys) <= set(_header_cells(out.getvalue())), out.getvalue()


def test_run_and_report_names_are_never_cut(demo_warehouse):
    # `report runs` printed 'df_inde…resolver', `report --list` 'cross_r…hotspots'
    from ctda_sql.cli.output import render

    listing = demo_warehouse.reports()
    names = [row[0] for row in listing.fetchall()]
    text = render(["name", "description", "params"], demo_warehouse.reports().fetchall(), "table", 80)
    assert all(f"│ {name} " in text for name in names)
    assert "include_last_step BOOLEAN" in text  # a parameter's name stays whole where its line wraps
    long_run = "df_index_resolver_" * 2
    text = render(["run", "run_id", "ingested_at", "ranks", "world_size", "events", "steps", "meta"],
                  [(long_run, 1, "2026-01-01 00:00:00.000000", 2, 2, 40573, 3, "{}")], "table", 80,
                  keys=["run", "ranks", "steps"])
    assert f"│ {long_run} │" in text and {"ranks", "steps"} <= set(_header_cells(text))


@pytest.mark.parametrize("width", WIDTHS)
def test_report_list(demo_warehouse, width):
    from ctda_sql.cli.output import render

    listing = demo_warehouse.reports()
    out = io.StringIO(render(listing.columns, listing.fetchall(), "table", width) + "\n")
    _fits(out.getvalue(), width)
    _check(f"report-list-{width}", f"$ ctda-sql report --list --max-width {width}\n{out.getvalue()}")


@pytest.mark.parametrize("width", WIDTHS)
def test_demo_tables(demo_warehouse, width, monkeypatch):
    from ctda_sql.cli import demo

    monkeypatch.setenv("COLUMNS", str(width))  # demo tables fit the terminal, or $COLUMNS in a pipe
    [(run_id,)] = demo_warehouse.sql("SELECT run_id FROM runs WHERE name = $n", {"n": RUN}).fetchall()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        demo._print_summary(demo_warehouse, run_id)
        demo._print_comparison(demo_warehouse, run_id)
    _fits(out.getvalue(), width)
    _check(f"demo-{width}", f"$ COLUMNS={width} ctda-sql demo  (its tables)\n{out.getvalue()}")
