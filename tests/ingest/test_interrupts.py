"""Ctrl-C: one `interrupted` line, exit 130, no traceback, and a database either exactly as it
was or holding the whole command's work. Real SIGINTs go to a ctda-sql process group at
several points of ingest and analyze; a Ctrl-C just after COMMIT is placed in-process."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

import ctda_sql.core.transaction
from ctda_sql.core.transaction import Interrupted, transaction

from helpers.cli import console_script
from helpers.traces import busy_trace

# fractions of an uninterrupted run (timed from the moment the database file is open)
SIGNAL_POINTS = (0.0, 0.1, 0.2, 0.35, 0.5)


def state(db_path: Path) -> dict:
    """What a command leaves: row counts of every table and the traces per run."""
    if not db_path.exists():
        return {}
    with duckdb.connect(str(db_path), read_only=True) as con:
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY 1").fetchall()]
        counts = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
        traces = con.execute("SELECT r.name, t.rank, t.file_sha256 FROM traces t "
                             "JOIN runs r USING (run_id) ORDER BY ALL").fetchall()
    return {"counts": counts, "traces": traces}


def has_open(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def run_with_sigint(db_path: Path, args: list[str], delay: float | None) -> tuple[subprocess.CompletedProcess, float]:
    """Run ctda-sql ARGS; `delay` seconds after it opened the database, Ctrl-C its process group
    (as a terminal does). Returns the result and the seconds from open to exit."""
    process = subprocess.Popen([console_script(), "--db", str(db_path), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not has_open(process.pid, db_path) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    opened = time.monotonic()
    if delay is not None and process.poll() is None:
        time.sleep(delay)
        os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err), time.monotonic() - opened


def interrupt_during_work(start: Path, db_path: Path, args: list[str], delay: float,
                          tries: int = 4) -> subprocess.CompletedProcess:
    """Ctrl-C ARGS `delay` seconds in, on a fresh copy of `start` each try. A command that ran
    faster than it was timed ends before the signal (which it then ignores, by design, exit 0
    with the work saved); that is no Ctrl-C during the work, so try again at half the delay."""
    for _ in range(tries):
        db_path.write_bytes(start.read_bytes())
        done, _ = run_with_sigint(db_path, args, delay)
        if done.returncode != 0:
            return done
        delay /= 2
    return done


def assert_interrupted(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    # the one line; only warnings the command printed before it was stopped may precede it
    assert lines and lines[-1].startswith("interrupted"), done.stderr
    assert all(line.startswith("warning:") for line in lines[:-1]), done.stderr


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the open database")


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> dict:
    """The trace, and the states before and after an uninterrupted ingest and analyze."""
    folder = tmp_path_factory.mktemp("interrupts")
    trace = busy_trace(folder / "busy.json")
    base = folder / "base.duckdb"
    assert subprocess.run([console_script(), "--db", str(base), "ingest", "-q",
                           str(Path(__file__).parents[2] / "warehouse/data/demo_trace.json.gz")],
                          capture_output=True, timeout=120).returncode == 0
    ingested, analyzed = folder / "ingested.duckdb", folder / "analyzed.duckdb"
    timings = {"ingest": timed_run(base, ingested, ["ingest", "-q", str(trace), "--run", "busy"]),
               "analyze": timed_run(ingested, analyzed, ["analyze", "-q"])}
    return {"trace": trace, "base": base, "ingested": ingested, "analyzed": analyzed, "timings": timings}


def timed_run(start: Path, result: Path, args: list[str]) -> float:
    """Run ARGS on a copy of `start` left at `result`; the shortest of two runs, in seconds."""
    seconds = []
    for _ in range(2):
        result.write_bytes(start.read_bytes())
        done, took = run_with_sigint(result, args, None)
        assert done.returncode == 0, done.stderr
        seconds.append(took)
    return min(seconds)


@needs_proc
@pytest.mark.parametrize("point", SIGNAL_POINTS)
def test_ctrl_c_during_ingest(tmp_path, workload, point):
    db_path = tmp_path / "db.duckdb"
    args = ["ingest", "-q", str(workload["trace"]), "--run", "busy"]
    done = interrupt_during_work(workload["base"], db_path, args, point * workload["timings"]["ingest"])
    assert_interrupted(done)
    assert state(db_path) in (state(workload["base"]), state(workload["ingested"]))


@needs_proc
@pytest.mark.parametrize("point", SIGNAL_POINTS)
def test_ctrl_c_during_analyze(tmp_path, workload, point):
    db_path = tmp_path / "db.duckdb"
    done = interrupt_during_work(workload["ingested"], db_path, ["analyze", "-q"],
                                 point * workload["timings"]["analyze"])
    assert_interrupted(done)
    assert state(db_path) in (state(workload["ingested"]), state(workload["analyzed"]))


@needs_proc
def test_ctrl_c_during_first_ingest_leaves_no_database(tmp_path, workload):
    db_path = tmp_path / "new.duckdb"
    done, _ = run_with_sigint(db_path, ["ingest", "-q", str(workload["trace"])], 0.0)
    assert_interrupted(done)
    assert "unchanged" in done.stderr
    assert list(tmp_path.iterdir()) == []


def _commit_then_ctrl_c(con):
    con.execute("COMMIT")
    raise KeyboardInterrupt


def test_ctrl_c_just_after_commit_of_ingest_keeps_the_run(tmp_path, run_cli, db_path, monkeypatch):
    monkeypatch.setattr(ctda_sql.core.transaction, "_commit", _commit_then_ctrl_c)
    result = run_cli("ingest", "-q", str(busy_trace(tmp_path / "t.json", steps=2, ops=4)), "--run", "kept")
    assert result.code == 130
    assert result.err.strip() == "interrupted after the work was saved"
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("SELECT name FROM runs").fetchall() == [("kept",)]


def test_ctrl_c_just_after_commit_of_analyze_keeps_the_paths(tmp_path, run_cli, db_path, monkeypatch):
    assert run_cli("ingest", "-q", str(busy_trace(tmp_path / "t.json", steps=2, ops=4))).code == 0
    monkeypatch.setattr(ctda_sql.core.transaction, "_commit", _commit_then_ctrl_c)
    result = run_cli("analyze", "-q")
    assert (result.code, result.err.strip()) == (130, "interrupted after the work was saved")
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM critical_path").fetchone()[0] > 0


@pytest.mark.parametrize("how", [KeyboardInterrupt(), RuntimeError("Query interrupted"),
                                 duckdb.InterruptException("INTERRUPT Error: Interrupted!")],
                         ids=["python", "duckdb_runtime_error", "duckdb_interrupt"])
def test_any_form_of_ctrl_c_inside_a_transaction_rolls_back(how):
    con = duckdb.connect()
    con.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(Interrupted) as caught:
        with transaction(con):
            con.execute("INSERT INTO t VALUES (1)")
            raise how
    assert caught.value.saved is False
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 0


def test_a_failure_that_is_not_ctrl_c_is_re_raised_after_rollback():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(ValueError):
        with transaction(con):
            con.execute("INSERT INTO t VALUES (1)")
            raise ValueError("bad")
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 0


def test_ctrl_c_that_duckdb_wrapped_in_an_error_of_its_own_is_an_interruption(tmp_path, run_cli, db_path, monkeypatch):
    """DuckDB turns a Ctrl-C inside a Python callback (reading a registered Arrow table) into
    'Invalid Input Error: ... failed: KeyboardInterrupt'; it still ends in the one line."""
    import ctda_sql.ingest.traceio

    def check_events_interrupted(*args):
        try:
            os.kill(os.getpid(), signal.SIGINT)  # the real signal, through ctda-sql's handler
        except KeyboardInterrupt:
            raise duckdb.InvalidInputException("reading the schema of the object registered as "
                                               "'events' failed: KeyboardInterrupt:") from None

    monkeypatch.setattr(ctda_sql.ingest.traceio, "_check_events", check_events_interrupted)
    result = run_cli("ingest", "-q", str(busy_trace(tmp_path / "t.json", steps=2, ops=4)))
    assert (result.code, result.err.strip()) == (130, "interrupted; the database is unchanged")
    assert not db_path.exists()
