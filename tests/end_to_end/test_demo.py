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

DEMO_TRACE = resources.files("ctda_sql") / "data/demo_trace.json.gz"
NCCL_TRACE = resources.files("ctda_sql") / "data/nccl.json.gz"


@pytest.fixture
def demo_cli(run_cli, tmp_path):
    """`ctda-sql demo` on the small recorded CPU trace, files written under tmp_path."""
    def run(*args: str):
        return run_cli("demo", "--trace", str(DEMO_TRACE), "--out", str(tmp_path), *args)
    return run


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


def test_demo_ingests_into_the_given_db_and_prints_the_summary(demo_cli, db_path, demo_events):
    result = demo_cli()
    assert result.code == 0, result.err
    assert f"{len(demo_events):,} events, 3 steps" in result.out
    assert "Top 10 ops by total time" in result.out
    assert "aten::addmm" in result.out
    assert "main: 1" in result.out
    with duckdb.connect(str(db_path), read_only=True) as con:
        counts = con.execute("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM steps), "
                             "(SELECT list(name) FROM runs)").fetchone()
    assert counts == (len(demo_events), 3, ["demo"])


def test_demo_prints_critical_path_reports(demo_cli, db_path):
    out = demo_cli().out
    assert "\nhotspots:" in out and "\ncpcr:" in out
    assert "ctda_hotspot" in out and "per_thread_cpcr" in out
    with duckdb.connect(str(db_path), read_only=True) as con:
        steps = con.execute("SELECT DISTINCT step FROM critical_path ORDER BY step").fetchall()
    assert steps == [(2,), (3,), (4,)]


def test_demo_twice_on_one_db_skips_the_reload_and_still_summarises(demo_cli, db_path):
    demo_cli()
    again = demo_cli()
    assert again.code == 0
    assert "already ingested" in again.out
    assert "Top 10 ops by total time" in again.out


def test_demo_without_db_uses_a_temporary_database(tmp_path, monkeypatch):
    from ctda_sql.shell.entry import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTDA_DB", raising=False)
    assert main(["demo", "--trace", str(DEMO_TRACE)]) == 0
    assert list(tmp_path.glob("*.duckdb")) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-overlay.json.gz", "demo.html"]


def test_console_script_demo_runs_clean(db_path):
    script = shutil.which("ctda-sql") or str(Path(sys.executable).with_name("ctda-sql"))
    done = subprocess.run([script, "demo", "--db", str(db_path)], capture_output=True, text=True,
                          timeout=300, cwd=db_path.parent)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "ingested nccl.json.gz" in done.stdout
    # the point of the demo: linking the threads explains most of each step, apart almost none
    cpcr = duckdb.connect(str(db_path), read_only=True).execute(
        "SELECT method, min(c) FROM (SELECT method, step, sum(counted_us) / any_value(window_us) AS c "
        "FROM critical_path JOIN analysis_windows USING (run_id, rank, step) GROUP BY ALL) GROUP BY ALL").fetchall()
    assert dict(cpcr)["ctda"] > 5 * dict(cpcr)["per_thread"]
    for name in ("ui.perfetto.dev", "chrome://tracing", "demo.html", "demo-overlay.json.gz"):
        assert name in done.stdout
    assert (db_path.parent / "demo.html").stat().st_size > 1_000_000
    with gzip.open(db_path.parent / "demo-overlay.json.gz", "rt") as handle:
        assert any(e.get("cat") == "critical_path" for e in json.load(handle)["traceEvents"])


def test_bundled_nccl_trace_ships_with_its_licence():
    licence = resources.files("ctda_sql") / "data/LICENSE-HTA"
    assert "MIT License" in licence.read_text() and len(NCCL_TRACE.read_bytes()) < 1_000_000


def test_demo_out_folder_must_exist(run_cli, tmp_path):
    result = run_cli("demo", "--trace", str(DEMO_TRACE), "--out", str(tmp_path / "nope"))
    assert result.code == 1 and result.err.startswith("error: ") and "no such folder" in result.err
