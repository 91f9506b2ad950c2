"""Reliability fixes that are not bad input: epoch-nanosecond traces, parse folders of killed
ingests, and experiment columns with odd names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from test_bad_input import console_script
from test_interrupts import busy_trace
from warehouse.tracebuilder import TraceBuilder
from warehouse.traceio import remove_abandoned_parse_folders

EPOCH_NS = 1_700_000_000_000_000_000


def epoch_ns_trace(path: Path) -> Path:
    """Integer epoch nanoseconds, as some exporters write them."""
    b = TraceBuilder(rank=0, base_ts=EPOCH_NS)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, ts=0, dur=100_000)
    b.cpu_op(main, "aten::mm", ts=10_000, dur=20_000)
    b.launch(main, ts=12_000, dur=3_000, kernel="gemm", stream=7, kernel_ts=20_000, kernel_dur=40_000)
    return b.write(path)


def test_epoch_nanosecond_trace_gets_its_origin_scaled_once(tmp_path, run_cli, db_path):
    assert run_cli("ingest", str(epoch_ns_trace(tmp_path / "ns.json"))).code == 0
    with duckdb.connect(str(db_path), read_only=True) as con:
        origin = con.execute("SELECT origin_ts FROM runs").fetchone()[0]
        first, kernel = con.execute(
            "SELECT min(ts_us), max(dur_us) FILTER (WHERE cat = 'kernel') FROM events WHERE ph = 'X'").fetchone()
    assert origin == EPOCH_NS // 1000  # epoch microseconds, not 1000x smaller
    assert (first, kernel) == (0, 40)


@pytest.mark.parametrize("report", ["temporal_breakdown", "comm_overlap", "cpcr"])
def test_reports_run_on_an_epoch_nanosecond_trace(tmp_path, run_cli, report):
    assert run_cli("ingest", str(epoch_ns_trace(tmp_path / "ns.json"))).code == 0
    assert run_cli("analyze", "-q").code == 0
    result = run_cli("report", report)
    assert result.code == 0, result.err


# ---- parse folders of killed ingests ------------------------------------------------------

def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_next_ingest_removes_parse_folders_whose_owner_is_gone(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    abandoned = tmp_path / f"ctda-parse-{dead_pid()}-abc"
    in_use = tmp_path / f"ctda-parse-{os.getpid()}-def"
    unrelated = tmp_path / "ctda-parse-notapid"
    for folder in (abandoned, in_use, unrelated):
        folder.mkdir()
        (folder / "events.json").write_text("[]")
    assert remove_abandoned_parse_folders() == [abandoned]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([in_use.name, unrelated.name])


def test_sigkill_during_parse_leaves_a_folder_the_next_ingest_removes(tmp_path, db_path):
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    trace = busy_trace(tmp_path / "busy.json")
    command = [console_script(), "--db", str(db_path), "ingest", "-q"]
    process = subprocess.Popen([*command, str(trace)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(temp.glob("ctda-parse-*")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert list(temp.glob("ctda-parse-*")), "the ingest ended before its parse folder was seen"
    other = busy_trace(tmp_path / "other.json", steps=2, ops=4)
    assert subprocess.run([*command, str(other)], env=env, capture_output=True, timeout=120).returncode == 0
    assert list(temp.glob("ctda-parse-*")) == []


# ---- experiment columns with odd names -----------------------------------------------------

def test_odd_experiment_column_names_are_read_back(tmp_path, run_cli):
    trace = busy_trace(tmp_path / "m2.json", steps=2, ops=4)
    assert run_cli("ingest", str(trace), "--run", "m2", "--meta", "$.x=5").code == 0
    (tmp_path / "exp.csv").write_text('run,*,"a b",x"y\nm2,1,two,3\n')
    assert run_cli("meta", "load", str(tmp_path / "exp.csv"), "--key", "run").code == 0
    result = run_cli("query", "SELECT source, key, value FROM run_attributes WHERE source <> 'traces' ORDER BY ALL",
                     "--format", "csv")
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["source,key,value", "experiments,*,1", "experiments,a b,two",
                                       'experiments,"x""y",3', "meta,$.x,5"]
