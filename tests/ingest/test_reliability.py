"""Reliability fixes that are not bad input: epoch-nanosecond traces, parse folders of killed
ingests, and experiment columns with odd names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from ctda_sql.ingest.traceio import remove_abandoned_parse_folders
from ctda_sql.testing.tracebuilder import TraceBuilder

from helpers.cli import console_script
from helpers.traces import busy_trace

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


# ---- reports: windows without a path, unknown runs ----------------------------------------

def test_a_window_without_critical_path_is_listed_by_cpcr_with_its_reason(tmp_path, run_cli):
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, ts=0, dur=100)
    b.cpu_op(main, "aten::mm", ts=10, dur=20)
    b.step(2, main, ts=200, dur=100)  # nothing inside: no node, so no path
    assert run_cli("ingest", str(b.write(tmp_path / "t.json"))).code == 0
    assert run_cli("analyze", "-q").code == 0
    rows = [r for r in json.loads(run_cli("report", "cpcr", "--format", "json").out) if r["method"] != "cross_rank"]
    assert [(r["step"], r["method"]) for r in rows] == [(1, "ctda"), (1, "per_thread"), (2, "ctda"), (2, "per_thread")]
    empty = [r for r in rows if r["step"] == 2]
    for row in empty:
        assert (row["cpcr"], row["path_us"], row["path_nodes"], row["slack_before_us"]) == (0, 0, 0, 100)
        assert row["note"].startswith("no critical path")
    assert all(not (r["note"] or "").startswith("no critical path") for r in rows if r["step"] == 1)


def test_run_diff_with_an_unknown_run_says_so(tmp_path, run_cli):
    assert run_cli("ingest", str(busy_trace(tmp_path / "a.json", steps=2, ops=4))).code == 0
    for given in (["-p", "run_a=a", "-p", "run_b=nope"], ["-p", "run_a=nope", "-p", "run_b=a"]):
        result = run_cli("report", "run_diff", *given)
        assert result.code == 1
        assert result.err.strip().startswith("error: no run named 'nope'"), result.err


# ---- ingest bookkeeping ----------------------------------------------------------------------

def test_replace_into_another_run_leaves_no_empty_run(tmp_path, run_cli, db_path):
    trace = busy_trace(tmp_path / "t.json", steps=2, ops=4)
    assert run_cli("ingest", str(trace), "--run", "first").code == 0
    assert run_cli("ingest", str(trace), "--run", "second", "--replace").code == 0
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("SELECT name FROM runs").fetchall() == [("second",)]


@pytest.mark.parametrize("command", [["ingest", "BAD"], ["analyze", "--run", "nope"],
                                     ["meta", "load", "EXP", "--key", "nope"]],
                         ids=["ingest", "analyze", "meta_load"])
def test_a_failed_writable_command_leaves_the_database_bytes_alone(tmp_path, run_cli, db_path, command):
    assert run_cli("ingest", str(busy_trace(tmp_path / "t.json", steps=2, ops=4))).code == 0
    (tmp_path / "bad.json").write_text('{"traceEvents": [')
    (tmp_path / "exp.csv").write_text("run,x\nt,1\n")
    paths = {"BAD": str(tmp_path / "bad.json"), "EXP": str(tmp_path / "exp.csv")}
    before = db_path.read_bytes()
    assert run_cli(*[paths.get(arg, arg) for arg in command]).code == 1
    assert db_path.read_bytes() == before


@pytest.mark.parametrize("gap", ["nan", "inf", "-1"])
def test_analyze_refuses_a_wait_gap_that_is_not_a_finite_number(tmp_path, run_cli, db_path, gap):
    """Issue 35 (Low): `analyze --wait-gap-us nan` was accepted (NaN fails every comparison,
    so no hand-off matched)."""
    assert run_cli("ingest", str(busy_trace(tmp_path / "t.json", steps=2, ops=4))).code == 0
    before = db_path.read_bytes()
    result = run_cli("analyze", "--wait-gap-us", gap)
    assert result.code == 1 and result.out == ""
    assert result.err == f"error: --wait-gap-us must be a finite number, 0 or more, got {gap}\n"
    assert db_path.read_bytes() == before


# ---- --safe: no file but the warehouse ---------------------------------------------------------

FILE_ACCESS = {
    "copy_to": "COPY runs TO '{folder}/runs.csv'",
    "export_database": "EXPORT DATABASE '{folder}/export'",
    "read_csv": "SELECT * FROM read_csv('{folder}/exp.csv')",
    "read_text": "SELECT * FROM read_text('{folder}/exp.csv')",
    "attach": "ATTACH '{folder}/other.duckdb' AS other",
    "turn_it_back_on": "SET enable_external_access = true",
}


@pytest.fixture
def shared_warehouse(tmp_path, run_cli) -> Path:
    assert run_cli("ingest", str(busy_trace(tmp_path / "t.json", steps=2, ops=4))).code == 0
    (tmp_path / "exp.csv").write_text("run,x\nt,1\n")
    return tmp_path


@pytest.mark.parametrize("sql", FILE_ACCESS.values(), ids=FILE_ACCESS.keys())
def test_safe_query_refuses_every_file_but_the_warehouse(shared_warehouse, run_cli, sql):
    before = sorted(p.name for p in shared_warehouse.iterdir())
    result = run_cli("query", "--safe", sql.format(folder=shared_warehouse))
    assert result.code == 1
    assert result.err.startswith("error:") and len(result.err.strip().splitlines()) == 1, result.err
    assert sorted(p.name for p in shared_warehouse.iterdir()) == before


def test_safe_query_and_report_still_read_the_warehouse(shared_warehouse, run_cli):
    assert run_cli("query", "--safe", "SELECT count(*) AS n FROM runs", "-f", "csv").out.split() == ["n", "1"]
    assert run_cli("report", "--safe", "runs").code == 0


def test_safe_report_from_a_user_folder_cannot_write_files(shared_warehouse, run_cli):
    reports = shared_warehouse / "reports"
    reports.mkdir()
    (reports / "leak.sql").write_text(f"-- name: leak\nCOPY runs TO '{shared_warehouse}/leak.csv';\n")
    result = run_cli("report", "--safe", "--reports", str(reports), "leak")
    assert result.code == 1 and "disabled" in result.err
    assert not (shared_warehouse / "leak.csv").exists()


@pytest.mark.parametrize("read_only", [True, False], ids=["read_only", "writable"])
def test_safe_shell_refuses_files_but_reads_the_warehouse(shared_warehouse, db_path, read_only):
    from ctda_sql.shell.app import open_state

    state = open_state(str(db_path), read_only=read_only, safe=True)
    try:
        with state.holding(write=True):  # the file is attached while each input runs
            assert state.con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
            with pytest.raises(duckdb.PermissionException):
                state.con.execute(f"COPY runs TO '{shared_warehouse}/runs.csv'")
            with pytest.raises(duckdb.PermissionException):
                state.con.execute(f"ATTACH '{shared_warehouse}/other.duckdb' AS other")
    finally:
        state.con.close()
    assert not (shared_warehouse / "runs.csv").exists()


def test_a_safe_shell_still_analyzes(shared_warehouse, db_path, run_cli):
    """--safe keeps SQL away from files; analysing is a dot command, not SQL. (.ingest names a
    file, so a --safe shell refuses it since issue 43: tests/shell/test_shell_safe.py.)"""
    from ctda_sql.shell.app import open_state
    from ctda_sql.shell.commands import run_dot_command

    second = busy_trace(shared_warehouse / "second.json", steps=3, ops=5)
    assert run_cli("ingest", "-q", str(second), "--run", "second").code == 0
    state = open_state(str(db_path), safe=True)
    try:
        with state.holding(write=True):
            run_dot_command(state, ".analyze --run second")
            counts = state.con.execute(
                "SELECT (SELECT count(*) FROM events JOIN runs AS r USING (run_id) WHERE r.name = 'second'), "
                "(SELECT count(*) FROM critical_path JOIN runs AS r USING (run_id) WHERE r.name = 'second')"
            ).fetchone()
    finally:
        state.con.close()
    assert counts[0] == len(json.loads(second.read_text())["traceEvents"])
    assert counts[1] > 0


# ---- issue 35: an analysis replaces the previous one of its (run, method) whole -------------

GLOO_STRAGGLER = Path(__file__).parents[1] / "data" / "gloo" / "straggler"
PATH_TABLES = ("analysis_windows", "nodes", "edges", "critical_path", "path_events")


def _table_counts(run_cli) -> list[str]:
    sql = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in PATH_TABLES)
    result = run_cli("query", sql, "-f", "csv")
    assert result.code == 0, result.err
    return result.out.splitlines()


def _rounded_rows(text: str) -> list[tuple]:
    """CSV rows, numbers to 9 significant digits (sums over rows in another order differ in
    their last bits)."""
    import csv
    import io

    def cell(value: str):
        try:
            return f"{float(value):.9g}"
        except ValueError:
            return value

    return [tuple(cell(v) for v in row) for row in csv.reader(io.StringIO(text))]


def test_a_plain_analyze_after_an_annotation_window_analyze_keeps_no_stale_rows(run_cli):
    """Annotation windows are numbered 1..N like steps: `analyze --window P` then `analyze`
    kept the rows of the windows the second mode does not have (hotspots' aten::mm grew 25%)."""
    assert run_cli("ingest", "-q", str(GLOO_STRAGGLER)).code == 0
    assert run_cli("analyze", "-q").code == 0
    hotspots, counts = _rounded_rows(run_cli("report", "hotspots", "-f", "csv").out), _table_counts(run_cli)
    assert run_cli("analyze", "-q", "--window", "ProfilerStep").code == 0
    assert run_cli("analyze", "-q").code == 0
    assert _rounded_rows(run_cli("report", "hotspots", "-f", "csv").out) == hotspots
    assert _table_counts(run_cli) == counts


def test_changed_windows_drop_the_paths_of_methods_not_analysed_again(run_cli):
    """`analyze --method ctda --window P` after a full analyze: per_thread's rows built on the
    windows that changed go with them, those on unchanged windows stay."""
    assert run_cli("ingest", "-q", str(GLOO_STRAGGLER)).code == 0
    assert run_cli("analyze", "-q").code == 0
    assert run_cli("analyze", "-q", "--method", "ctda", "--window", "ProfilerStep").code == 0
    # every path row lies inside the window its (run, rank, step) names now
    outside = run_cli("query", "SELECT count(*) FROM critical_path AS p LEFT JOIN analysis_windows AS w "
                      "USING (run_id, rank, step) WHERE w.step IS NULL OR p.counted_start_us < w.start_us "
                      "OR p.counted_end_us > w.e2e_end_us", "-f", "csv")
    assert outside.code == 0 and outside.out.splitlines()[1] == "0", outside.err


# ---- issue 35 item 20: a rank that does not fit the rank column -------------------------------

@pytest.mark.parametrize("rank, name", [(2**70, "t.json"), (-1, "t.json"), (None, "rank-99999999999.json")],
                         ids=["distributed_2_70", "distributed_negative", "file_name"])
def test_a_rank_out_of_range_is_one_error_line(tmp_path, run_cli, db_path, rank, name):
    trace = json.loads(epoch_ns_trace(tmp_path / "base.json").read_text())
    trace.pop("distributedInfo", None)  # the file name names the rank
    if rank is not None:
        trace["distributedInfo"] = {"rank": rank, "world_size": 2}
    (tmp_path / name).write_text(json.dumps(trace))
    result = run_cli("ingest", str(tmp_path / name))
    lines = result.err.strip().splitlines()
    assert result.code == 1 and len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / name}: the rank"), result.err
    assert not db_path.exists()


# ---- issue 35 items 17, 19, 21: the shell --------------------------------------------------

def test_a_safe_shell_reads_no_file_with_dot_read(shared_warehouse, db_path, tmp_path):
    """.read read any file and echoed its first line in the parse error (the password file)."""
    from ctda_sql.shell.app import open_state, run_and_show

    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:secret-line\n")
    state = open_state(str(db_path), read_only=True, safe=True)
    try:
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert not run_and_show(state, f".read {secret}")
    finally:
        state.con.close()
    assert err.getvalue().startswith("error: .read is off in a --safe session") and "secret-line" not in err.getvalue()


def test_a_history_file_that_is_a_folder_is_said_once_and_the_shell_works(shared_warehouse, db_path, tmp_path,
                                                                          monkeypatch, capsys):
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from ctda_sql.shell.app import build_session, loop, open_state

    folder = tmp_path / "history_folder"
    folder.mkdir()
    monkeypatch.setenv("CTDA_HISTORY", str(folder))
    state = open_state(str(db_path), read_only=True)
    try:
        with create_pipe_input() as pipe:
            session = build_session(state, input=pipe, output=DummyOutput())
            pipe.send_text("SELECT 'first' AS a;\rSELECT 'second' AS b;\r\x04")
            assert loop(state, session) == 0
    finally:
        state.con.close()
    captured = capsys.readouterr()
    assert "first" in captured.out and "second" in captured.out
    assert captured.err.count("warning: history file") == 1 and "Traceback" not in captured.err


def test_ctrl_c_during_dot_ingest_cancels_it_and_the_shell_goes_on(shared_warehouse, db_path, monkeypatch, capsys):
    """Ctrl-C during `.ingest` quit the shell (exit 130); during a query it only cancels it."""
    from ctda_sql.shell.app import open_state, run_and_show

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    second = busy_trace(shared_warehouse / "second.json", steps=2, ops=3)
    state = open_state(str(db_path))
    try:
        monkeypatch.setattr("ctda_sql.ingest.load.ingest", interrupted)
        assert not run_and_show(state, f".ingest {second} --run second")
        monkeypatch.undo()
        assert run_and_show(state, "SELECT count(*) AS runs FROM runs;")
    finally:
        state.con.close()
    captured = capsys.readouterr()
    assert "error: interrupted; the database is unchanged" in captured.err
    assert "runs" in captured.out


# ---- issue 35 item 18: one bad file in a reports folder --------------------------------------

@pytest.mark.parametrize("bad", ["bad_default", "invalid_utf8", "folder", "fifo", "unknown_type"])
def test_a_bad_report_file_is_skipped_with_a_warning_naming_it(shared_warehouse, run_cli, tmp_path, bad):
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "good.sql").write_text("-- description: works\nSELECT 42 AS answer\n")
    target = folder / "x.sql"
    if bad == "bad_default":
        target.write_text("-- param: top INTEGER = many   rows\nSELECT $top\n")
    elif bad == "invalid_utf8":
        target.write_bytes(b"-- description: \xff\xfe\nSELECT 1\n")
    elif bad == "folder":
        target.mkdir()
    elif bad == "fifo":
        os.mkfifo(target)
    elif bad == "unknown_type":
        target.write_text("-- param: top WIDGET = 1   rows\nSELECT $top\n")
    for args in (("report", "runs", "-f", "csv"), ("report", "good", "-f", "csv"), ("report", "--list")):
        result = run_cli(*args, "--reports", str(folder))
        assert result.code == 0, result.err
        assert result.err.strip() .startswith(f"warning: skipped report file {target}")
        assert "Traceback" not in result.err
    assert "42" in run_cli("report", "good", "-f", "csv", "--reports", str(folder)).out
