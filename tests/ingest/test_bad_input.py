"""Bad input: one `error:` line naming the file and the problem, non-zero exit, no traceback,
and a database exactly as it was before (checked on an already-populated database)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest

from ctda_sql.testing.tracebuilder import TraceBuilder

from helpers.cli import console_script

# ---- helpers ----------------------------------------------------------------------------

def snapshot(db_path: Path) -> dict:
    """Row counts of every table plus the runs rows: what a failed ingest must not change."""
    with duckdb.connect(str(db_path), read_only=True) as con:
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY 1").fetchall()]
        counts = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
        runs = con.execute("SELECT * FROM runs ORDER BY run_id").fetchall()
        traces = con.execute("SELECT run_id, rank, file_sha256 FROM traces ORDER BY ALL").fetchall()
    return {"counts": counts, "runs": runs, "traces": traces}


def good_trace(path: Path, rank: int = 0, shift: float = 0) -> Path:
    b = TraceBuilder(rank=rank)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, ts=shift, dur=100)
    b.cpu_op(main, "aten::mm", ts=shift + 10, dur=20)
    return b.write(path)


@pytest.fixture
def populated(tmp_path, run_cli, db_path) -> dict:
    """A database holding one run already; returns its snapshot."""
    assert run_cli("ingest", str(good_trace(tmp_path / "existing.json.gz"))).code == 0
    return snapshot(db_path)


def assert_clean_failure(result_code: int, out: str, err: str, *needles: str) -> None:
    """Non-zero exit, one `error:` line on stderr naming each needle, no traceback."""
    assert result_code != 0
    assert "Traceback" not in out + err
    error_lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, err
    for needle in needles:
        assert needle in error_lines[0], err


def run_script(db_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([console_script(), "--db", str(db_path), *args],
                          capture_output=True, text=True, timeout=120)


# ---- bad files --------------------------------------------------------------------------

def _events_text(*events: str) -> str:
    return '{"schemaVersion": 1, "traceEvents": [' + ", ".join(events) + "]}"


_OK_EVENT = '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1700000000000000, "dur": 5}'


def _truncated_gzip(path: Path) -> None:
    good = gzip.compress(_events_text(*[_OK_EVENT] * 50).encode())
    path.write_bytes(good[: len(good) // 2])


# (case id, file name, file content or writer, words the error line must contain)
BAD_FILES = [
    ("empty", "empty.json", "", "file is empty"),
    ("truncated_gz", "cut.json.gz", _truncated_gzip, "truncated or corrupt gzip"),
    ("invalid_json", "broken.json", '{"traceEvents": [{"ph": "X",', "invalid JSON"),
    ("top_level_list", "list.json", "[" + _OK_EVENT + "]", "not a Kineto trace"),
    ("no_trace_events", "other.json", '{"schemaVersion": 1, "events": []}', "no traceEvents"),
    ("events_not_a_list", "scalar.json", '{"traceEvents": 5}', "traceEvents"),
    ("no_events", "noevents.json", '{"schemaVersion": 1, "traceEvents": [ ]}', "traceEvents is empty"),
    ("missing_ts", "nots.json",
     _events_text(_OK_EVENT, '{"ph": "X", "name": "aten::add", "pid": 1, "tid": 1, "dur": 1}'),
     "event 1 has no 'ts' field"),
    ("missing_name", "noname.json",
     _events_text('{"ph": "X", "pid": 1, "tid": 1, "ts": 1700000000000001, "dur": 1}'),
     "event 0 has no 'name' field"),
    ("negative_dur", "negative.json",
     _events_text(_OK_EVENT, '{"ph": "X", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1700000000000001, "dur": -3}'),
     "event 1 has an invalid duration"),
    ("nan_dur", "nan.json",
     _events_text('{"ph": "X", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1700000000000001, "dur": NaN}'),
     "NaN"),
    ("null_name", "nullname.json",
     _events_text(_OK_EVENT, '{"ph": "X", "name": null, "pid": 1, "tid": 1, "ts": 1700000000000001, "dur": 1}'),
     "event 1 has a null 'name'"),
    ("null_ts", "nullts.json",
     _events_text('{"ph": "X", "name": "aten::add", "pid": 1, "tid": 1, "ts": null, "dur": 1}'),
     "event 0 has a null 'ts'"),
    # a DECIMAL(38, 6) holds 1e30, and scaling it overflowed inside the transaction
    ("ts_1e30", "ts30.json", _events_text(_OK_EVENT, _OK_EVENT.replace("1700000000000000", "1e30")),
     "event 1 has a ts out of range"),
    ("ts_1e40", "ts40.json", _events_text(_OK_EVENT, _OK_EVENT.replace("1700000000000000", "1e40")),
     "event 1 has a ts out of range (1e40)"),
    ("ts_1e300", "ts300.json", _events_text(_OK_EVENT.replace("1700000000000000", "-1e300")),
     "event 0 has a ts out of range"),
    ("ts_300_digits", "digits.json", _events_text(_OK_EVENT.replace("1700000000000000", "9" * 300)),
     "(300 characters)"),
    ("huge_step_number", "hugestep.json",
     _events_text(_OK_EVENT.replace('"cpu_op", "name": "aten::mm"',
                                    '"user_annotation", "name": "ProfilerStep#99999999999999999999999"')),
     "step number is too large"),
    ("deeply_nested_args", "nested.json",
     _events_text(_OK_EVENT[:-1] + ', "args": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}"),
     "nested too deeply"),
]

BAD_CONTENT = {case[0]: case[2] for case in BAD_FILES}


def write_bad_file(folder: Path, name: str, content) -> Path:
    path = folder / name
    if callable(content):
        content(path)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize(("name", "content", "problem"), [c[1:] for c in BAD_FILES],
                         ids=[c[0] for c in BAD_FILES])
def test_bad_file_is_refused_and_db_unchanged(tmp_path, run_cli, db_path, populated, name, content, problem):
    path = write_bad_file(tmp_path, name, content)
    result = run_cli("ingest", str(path))
    assert_clean_failure(result.code, result.out, result.err, name, problem)
    assert snapshot(db_path) == populated


@pytest.mark.parametrize(("name", "content", "problem"), [c[1:] for c in BAD_FILES],
                         ids=[c[0] for c in BAD_FILES])
def test_console_script_prints_no_traceback_for_bad_file(tmp_path, db_path, populated, name, content, problem):
    path = write_bad_file(tmp_path, name, content)
    done = run_script(db_path, "ingest", str(path))
    assert_clean_failure(done.returncode, done.stdout, done.stderr, name, problem)
    assert snapshot(db_path) == populated


def test_missing_path_is_refused(tmp_path, run_cli, db_path, populated):
    missing = tmp_path / "nowhere" / "rank-0.json.gz"
    result = run_cli("ingest", str(missing))
    assert_clean_failure(result.code, result.out, result.err, str(missing), "no such file")
    assert snapshot(db_path) == populated


def test_missing_path_via_console_script(tmp_path, db_path, populated):
    missing = tmp_path / "nowhere.json"
    done = run_script(db_path, "ingest", str(missing))
    assert_clean_failure(done.returncode, done.stdout, done.stderr, str(missing), "no such file")
    assert snapshot(db_path) == populated


def test_folder_without_traces_is_refused(tmp_path, run_cli, db_path, populated):
    empty = tmp_path / "empty_folder"
    empty.mkdir()
    result = run_cli("ingest", str(empty))
    assert_clean_failure(result.code, result.out, result.err, str(empty), "no trace files")
    assert snapshot(db_path) == populated


# ---- batches: all or nothing ------------------------------------------------------------

def test_batch_with_unreadable_second_file_loads_nothing(tmp_path, run_cli, db_path, populated):
    first = good_trace(tmp_path / "rank-0.json")
    second = write_bad_file(tmp_path, "rank-1.json", '{"traceEvents": [')
    result = run_cli("ingest", str(first), str(second), "--run", "batch")
    assert_clean_failure(result.code, result.out, result.err, "rank-1.json", "invalid JSON")
    assert snapshot(db_path) == populated


def test_batch_failing_while_loading_second_file_loads_nothing(tmp_path, db_path, populated):
    """The negative duration is found inside the transaction, after rank 0 was written."""
    first = good_trace(tmp_path / "rank-0.json")
    second = write_bad_file(tmp_path, "rank-1.json", BAD_CONTENT["negative_dur"])
    done = run_script(db_path, "ingest", str(first), str(second), "--run", "batch")
    assert_clean_failure(done.returncode, done.stdout, done.stderr, "rank-1.json", "invalid duration")
    assert snapshot(db_path) == populated


def test_ctrl_c_on_second_file_exits_130_and_leaves_db_unchanged(tmp_path, run_cli, db_path, populated, monkeypatch):
    import ctda_sql.ingest.load

    original = ctda_sql.ingest.load._insert_trace_row
    calls = []

    def interrupt_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(ctda_sql.ingest.load, "_insert_trace_row", interrupt_on_second)
    files = [str(good_trace(tmp_path / f"rank-{r}.json", rank=r, shift=r)) for r in (0, 1)]
    result = run_cli("ingest", *files, "--run", "interrupted")
    assert result.code == 130
    assert "interrupted" in result.err and "Traceback" not in result.out + result.err
    assert len(calls) == 2
    assert snapshot(db_path) == populated


# ---- a database held by another process -------------------------------------------------

_HOLD_DB = (
    "import duckdb, sys\n"
    "con = duckdb.connect(sys.argv[1])\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


@contextmanager
def write_lock_held(db_path: Path):
    """Hold a write connection on the database in another process (DuckDB locks per process)."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_DB, str(db_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_locked_database_is_reported_and_left_alone(tmp_path, db_path, populated):
    new_trace = good_trace(tmp_path / "new.json", shift=5)
    with write_lock_held(db_path):
        done = run_script(db_path, "ingest", str(new_trace))
    assert_clean_failure(done.returncode, done.stdout, done.stderr, str(db_path), "locked")
    assert snapshot(db_path) == populated


def test_locked_database_in_process(tmp_path, db_path, populated, run_cli):
    new_trace = good_trace(tmp_path / "new.json", shift=5)
    with write_lock_held(db_path):
        result = run_cli("ingest", str(new_trace))
    assert_clean_failure(result.code, result.out, result.err, str(db_path), "locked")
    assert snapshot(db_path) == populated


def test_database_from_an_older_layout_is_refused_before_ingest(tmp_path, run_cli, db_path):
    # before end_us was generated, an ingest here would have stored NULL end times
    with duckdb.connect(str(db_path)) as con:
        con.execute("CREATE TABLE events (run_id INTEGER, ts_us DOUBLE, dur_us DOUBLE, end_us DOUBLE)")
    result = run_cli("ingest", str(good_trace(tmp_path / "t.json.gz")))
    assert_clean_failure(result.code, result.out, result.err, "older ctda-sql", "new database")
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM events").fetchone()[0] == 0


def test_failed_first_ingest_leaves_no_database_file(tmp_path, run_cli):
    new_db = tmp_path / "new.duckdb"
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"traceEvents": [')
    result = run_cli("ingest", str(truncated), db=new_db)
    assert_clean_failure(result.code, result.out, result.err, "truncated.json")
    assert list(tmp_path.iterdir()) == [truncated]


# ---- --meta keys ------------------------------------------------------------------------

@pytest.mark.parametrize("second_meta", [["--meta", "a=2"], ["--meta", "B=1", "--meta", "b=2"]],
                         ids=["stored_key", "same_command"])
def test_meta_key_differing_only_in_case_is_refused_and_later_ingests_work(
        tmp_path, run_cli, db_path, second_meta):
    first = good_trace(tmp_path / "first.json")
    assert run_cli("ingest", str(first), "--run", "m2", "--meta", "A=1").code == 0
    before = snapshot(db_path)
    result = run_cli("ingest", str(good_trace(tmp_path / "second.json", shift=3)), "--run", "m3", *second_meta)
    assert_clean_failure(result.code, result.out, result.err, "only in case")
    assert snapshot(db_path) == before
    third = run_cli("ingest", str(good_trace(tmp_path / "third.json", shift=5)), "--run", "m4", "--meta", "A=3")
    assert third.code == 0, third.err
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("SELECT run, A FROM run_meta ORDER BY run").fetchall() == [("m2", 1), ("m4", 3)]


def test_a_step_failing_after_the_events_are_written_leaves_no_run(tmp_path, run_cli, db_path, populated, monkeypatch):
    """Refreshing run_meta is the last step of ingest: it is inside the transaction too."""
    import ctda_sql.ingest.load

    def fail(con):
        raise duckdb.InvalidInputException("refresh failed")

    monkeypatch.setattr(ctda_sql.ingest.load, "refresh_run_meta", fail)
    result = run_cli("ingest", str(good_trace(tmp_path / "new.json", shift=5)), "--run", "late")
    assert_clean_failure(result.code, result.out, result.err, "refresh failed")
    assert snapshot(db_path) == populated


# ---- files that are not plain readable files ---------------------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_fifo_is_refused_up_front(tmp_path, db_path, populated):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    done = run_script(db_path, "ingest", str(fifo))  # used to block forever holding the lock
    assert_clean_failure(done.returncode, done.stdout, done.stderr, "pipe.json", "not a regular file")
    assert snapshot(db_path) == populated


def test_unreadable_file_is_one_line(tmp_path, run_cli, db_path, populated, monkeypatch):
    locked = good_trace(tmp_path / "locked.json")
    original = Path.read_bytes

    def read_bytes(path):
        if path == locked:  # chmod 000 does not stop root, so the refusal is simulated
            raise PermissionError(13, "Permission denied", str(path))
        return original(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    result = run_cli("ingest", str(locked))
    assert_clean_failure(result.code, result.out, result.err, "locked.json", "Permission denied")
    assert snapshot(db_path) == populated


def test_a_failure_inside_the_insert_names_its_own_cause(tmp_path, run_cli, db_path, populated, monkeypatch):
    """Cleanup after a failed statement used to fail too ("Current transaction is aborted")
    and hid the statement's own error."""
    import ctda_sql.ingest.load

    monkeypatch.setattr(ctda_sql.ingest.load, "_events_sql",
                        lambda: "SELECT error('the real cause' || $run_id || $origin_ts)")
    result = run_cli("ingest", str(good_trace(tmp_path / "new.json", shift=5)))
    assert_clean_failure(result.code, result.out, result.err, "the real cause")
    assert "aborted" not in result.err
    assert snapshot(db_path) == populated


def test_two_files_claiming_one_rank_are_refused(tmp_path, run_cli, db_path, populated):
    first = good_trace(tmp_path / "a.json", rank=3)
    second = good_trace(tmp_path / "b.json", rank=3, shift=2)
    result = run_cli("ingest", str(first), str(second), "--run", "twins")
    assert_clean_failure(result.code, result.out, result.err, "a.json", "b.json", "both rank 3")
    assert snapshot(db_path) == populated


def test_a_database_already_holding_keys_differing_in_case_still_takes_ingests(tmp_path, run_cli, db_path):
    """Made before such keys were refused: run_meta keeps the first one as its column."""
    assert run_cli("ingest", str(good_trace(tmp_path / "one.json")), "--run", "m2", "--meta", "A=1").code == 0
    with duckdb.connect(str(db_path)) as con:
        con.execute("""UPDATE runs SET meta = '{"A": 1, "a": 2}'""")
    result = run_cli("ingest", str(good_trace(tmp_path / "two.json", shift=3)), "--run", "m3", "--meta", "A=3")
    assert result.code == 0, result.err
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("SELECT run, A FROM run_meta ORDER BY run").fetchall() == [("m2", 1), ("m3", 3)]
