"""`ctda-sql demo`: the bundled trace ingests and the summary says what the run holds."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import duckdb
import pytest

DEMO_TRACE = resources.files("warehouse") / "data/demo_trace.json.gz"


@pytest.fixture(scope="module")
def demo_events() -> list[dict]:
    with gzip.open(DEMO_TRACE.open("rb"), "rt") as handle:
        return json.load(handle)["traceEvents"]


def test_bundled_trace_is_small_and_has_steps_and_python_frames(demo_events):
    assert len(DEMO_TRACE.read_bytes()) < 1_500_000
    names = {e["name"] for e in demo_events}
    assert {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"} <= names
    assert any(e.get("cat") == "python_function" for e in demo_events)
    assert any(name.startswith("autograd::engine::evaluate_function:") for name in names)


def test_demo_ingests_into_the_given_db_and_prints_the_summary(run_cli, db_path, demo_events):
    result = run_cli("demo")
    assert result.code == 0, result.err
    assert f"{len(demo_events):,} events, 3 steps" in result.out
    assert "Top 10 ops by total time" in result.out
    assert "aten::addmm" in result.out
    assert "main: 1" in result.out
    with duckdb.connect(str(db_path), read_only=True) as con:
        counts = con.execute("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM steps), "
                             "(SELECT list(name) FROM runs)").fetchone()
    assert counts == (len(demo_events), 3, ["demo"])


def test_demo_prints_critical_path_reports_or_says_they_are_pending(run_cli, db_path):
    out = run_cli("demo").out
    try:
        import warehouse.analyze  # noqa: F401
    except ImportError:
        assert "warehouse.analyze is missing" in out
        return
    assert "\nhotspots:" in out and "\ncpcr:" in out
    with duckdb.connect(str(db_path), read_only=True) as con:
        steps = con.execute("SELECT DISTINCT step FROM critical_path ORDER BY step").fetchall()
    assert steps == [(2,), (3,), (4,)]


def test_demo_twice_on_one_db_skips_the_reload_and_still_summarises(run_cli, db_path):
    run_cli("demo")
    again = run_cli("demo")
    assert again.code == 0
    assert "already ingested" in again.out
    assert "Top 10 ops by total time" in again.out


def test_demo_without_db_uses_a_temporary_database(tmp_path, monkeypatch):
    from ctda_shell.entry import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTDA_DB", raising=False)
    assert main(["demo"]) == 0
    assert list(tmp_path.glob("*.duckdb")) == []


def test_console_script_demo_runs_clean(db_path):
    script = shutil.which("ctda-sql") or str(Path(sys.executable).with_name("ctda-sql"))
    done = subprocess.run([script, "demo", "--db", str(db_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "ingested demo_trace.json.gz" in done.stdout
