"""The interactive shell driven through prompt_toolkit's pipe input: SQL, dot commands, errors."""

from __future__ import annotations

import json
import threading
import time

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from ctda_sql.shell.app import build_session, input_complete, loop, open_state, run_and_show, split_input
from ctda_sql.shell.commands import REGISTRY

from shell_helpers import write_trace

ENTER, CTRL_C, CTRL_D = "\r", "\x03", "\x04"


@pytest.fixture(autouse=True)
def private_history(tmp_path, monkeypatch):
    monkeypatch.setenv("CTDA_HISTORY", str(tmp_path / "history"))
    monkeypatch.delenv("CTDA_REPORTS", raising=False)


@pytest.fixture
def warehouse(tmp_path, run_cli, db_path):
    assert run_cli("ingest", "-q", str(write_trace(tmp_path)), "--run", "train", "--meta", "bs=8").code == 0
    return db_path


@pytest.fixture
def state(warehouse):
    shell = open_state(str(warehouse))
    yield shell
    shell.set_output(None)
    shell.con.close()


def drive(state, *chunks: str, pause: float = 0.3) -> None:
    """Type `chunks` into a real PromptSession over a pipe, then Ctrl-D.

    Several chunks are typed with a pause between them, so that work prompt_toolkit does in
    the background (completion after Tab) finishes before the next keys arrive.
    """
    with create_pipe_input() as pipe:
        session = build_session(state, input=pipe, output=DummyOutput())
        typist = threading.Thread(target=_type, args=(pipe, [*chunks, CTRL_D], pause), daemon=True)
        typist.start()
        assert loop(state, session) == 0
        typist.join()


def _type(pipe, chunks: list[str], pause: float) -> None:
    for chunk in chunks:
        pipe.send_text(chunk)
        time.sleep(pause if len(chunks) > 2 else 0)


def test_a_query_prints_an_aligned_table(state, capsys):
    drive(state, "SELECT name, count(*) AS n FROM events WHERE name = 'aten::relu' GROUP BY name;" + ENTER)
    out = capsys.readouterr().out
    assert "aten::relu" in out and "(1 row)" in out


def test_sql_spans_lines_until_the_semicolon(state, capsys):
    drive(state, "SELECT 6 *" + ENTER + "7 AS answer" + ENTER + ";" + ENTER)
    assert "42" in capsys.readouterr().out


def test_ctrl_c_drops_the_input_and_the_session_goes_on(state, capsys):
    drive(state, "SELECT 'dropped'" + CTRL_C + "SELECT 'kept';" + ENTER)
    out = capsys.readouterr().out
    assert "kept" in out and "dropped" not in out


def test_errors_print_one_line_with_the_caret_and_the_session_goes_on(state, capsys):
    drive(state, "SELEC 1;" + ENTER + "SELECT * FROM nosuch;" + ENTER + "SELECT 'still here';" + ENTER)
    captured = capsys.readouterr()
    assert "still here" in captured.out
    errors = captured.err.splitlines()
    assert errors[0].startswith("error: Parser Error") and errors[1].startswith("LINE 1: SELEC 1;")
    assert errors[2].strip() == "^^^^^"
    assert any("nosuch does not exist" in line for line in errors)
    assert not any("Traceback" in line for line in errors)


def test_quit_leaves_before_later_input(state, capsys):
    drive(state, ".quit" + ENTER + "SELECT 'after quit';" + ENTER)
    assert "after quit" not in capsys.readouterr().out


def test_history_is_written_to_the_history_file(state, tmp_path):
    drive(state, "SELECT 1;" + ENTER)
    assert "SELECT 1;" in (tmp_path / "history").read_text()


@pytest.mark.parametrize("keys", ["emacs", "vi"])
def test_ctrl_r_then_one_enter_runs_the_statement_found(state, capsys, monkeypatch, keys):
    """Issue 35 (Low): Enter after Ctrl-R only put the statement in the buffer; the DuckDB
    CLI and readline run it."""
    from ctda_sql.core import config

    monkeypatch.setattr("ctda_sql.shell.app.load_config", lambda: config.Config(key_bindings=keys))
    drive(state, "SELECT 'needle' || 'found' AS hit;" + ENTER, "SELECT 'other' AS x;" + ENTER,
          "\x12needle", ENTER, "SELECT 'last' AS y;" + ENTER)
    out = capsys.readouterr().out
    assert out.count("needlefound") == 2 and out.index("other") < out.rindex("needlefound") < out.index("last")


def test_tab_completes_a_dot_command(state, capsys):
    drive(state, ".tabl\t", ENTER)
    assert "experiments" in capsys.readouterr().out


@pytest.mark.parametrize("text, complete", [
    ("SELECT 1", False), ("SELECT 1;", True), ("SELECT 1;  ", True), (".tables", True), ("", True),
    ("SELECT ';' FROM x\nWHERE y", False),
])
def test_enter_runs_only_complete_input(text, complete):
    assert input_complete(text) is complete


def test_dot_command_lines_split_from_sql():
    assert split_input("SELECT 1;\n.mode csv\nSELECT\n2;") == ["SELECT 1;", ".mode csv", "SELECT\n2;"]


# ---- dot commands (through run_and_show, as the loop calls it) ----------------------------

def run(state, text: str, capsys) -> tuple[bool, str, str]:
    worked = run_and_show(state, text)
    captured = capsys.readouterr()
    return worked, captured.out, captured.err


def test_help_is_generated_from_the_registry(state, capsys):
    _, out, _ = run(state, ".help", capsys)
    for command in REGISTRY.values():
        assert command.name in out and command.help[:30] in out


def test_help_for_one_command(state, capsys):
    _, out, _ = run(state, ".help timer", capsys)
    assert ".timer" in out and ".mode" not in out


@pytest.mark.parametrize("line, expected", [
    (".tables", "events"), (".schema runs", "ingested_at"), (".schema", "CREATE TABLE"),
    (".runs", "train"), (".reports", "hotspots_by_experiment"), (".report runs run=train", "train"),
])
def test_listing_commands(state, capsys, line, expected):
    worked, out, err = run(state, line, capsys)
    assert worked and expected in out, err


@pytest.mark.parametrize("line, message", [
    (".nosuch", "unknown command .nosuch"),
    (".schema nosuch", "no table or view named 'nosuch'"),
    (".report nosuch", "no report named 'nosuch'"),
    (".report runs bogus=1", "has no parameter 'bogus'"),
    (".report runs run", "must look like KEY=VALUE"),
    (".mode xml", "unknown mode 'xml'"),
    (".timer maybe", "usage: .timer on|off"),
    (".dialect klingon", "unknown dialect 'klingon'"),
    (".read /no/such/file.sql", "no such file"),
    (".analyze --method fastest", "invalid choice: 'fastest'"),
    (".analyze --wait-gap-us soon", "invalid float value: 'soon'"),
    (".ingest --bogus x", "unrecognized arguments: --bogus"),
    (".ingest", "usage: .ingest PATH... [--run NAME]"),
    (".ingest /no/such/trace.json", "no such file or folder"),
])
def test_dot_command_errors_are_one_line(state, capsys, line, message):
    worked, _, err = run(state, line, capsys)
    assert not worked and message in err and len(err.strip().splitlines()) == 1


def test_mode_changes_the_rendering(state, capsys):
    run(state, ".mode json", capsys)
    _, out, _ = run(state, "SELECT 1 AS a;", capsys)
    assert json.loads(out) == [{"a": 1}]
    run(state, ".mode csv", capsys)
    assert run(state, "SELECT 1 AS a, 'x' AS b;", capsys)[1] == "a,b\n1,x\n"


def test_timer_reports_elapsed_time(state, capsys):
    run(state, ".timer on", capsys)
    assert "time: " in run(state, "SELECT 1;", capsys)[2]
    run(state, ".timer off", capsys)
    assert "time: " not in run(state, "SELECT 1;", capsys)[2]


def test_output_sends_results_to_a_file_and_back(state, capsys, tmp_path):
    target = tmp_path / "out.csv"
    run(state, f".output {target}", capsys)
    run(state, ".mode csv", capsys)
    assert run(state, "SELECT 7 AS seven;", capsys)[1] == ""
    run(state, ".output stdout", capsys)
    assert target.read_text() == "seven\n7\n"
    assert "8" in run(state, "SELECT 8;", capsys)[1]


def test_read_runs_sql_and_dot_commands_from_a_file(state, capsys, tmp_path):
    script = tmp_path / "script.sql"
    script.write_text(".mode csv\nSELECT 1 AS one;\nSELECT\n  2 AS two;\n")
    _, out, _ = run(state, f".read {script}", capsys)
    assert out == "mode csv\none\n1\ntwo\n2\n"


def test_dialect_postgres_transpiles_typed_sql(state, capsys):
    run(state, ".dialect postgres", capsys)
    _, out, err = run(state, "SELECT FLOOR(7 / 2) * 2 AS bucket;", capsys)
    assert "6" in out, err


def test_ingest_and_meta_columns_from_the_shell(state, capsys, tmp_path):
    folder = tmp_path / "more"
    folder.mkdir()
    worked, out, err = run(state, f".ingest {write_trace(folder, 'second')} --run second --meta gpu=h100", capsys)
    assert worked and "second" in out, err
    _, out, _ = run(state, "SELECT run, gpu FROM run_meta WHERE gpu IS NOT NULL;", capsys)
    assert "h100" in out


def test_analyze_builds_the_critical_path_from_the_shell(state, capsys):
    worked, out, err = run(state, ".analyze --run train", capsys)
    assert worked and "CPCR" in out, err
    _, out, _ = run(state, "SELECT DISTINCT method FROM critical_path ORDER BY method;", capsys)
    assert "ctda" in out and "per_thread" in out


def test_read_only_refuses_writes_with_a_clear_line(warehouse, capsys):
    shell = open_state(str(warehouse), read_only=True)
    try:
        for line in ("CREATE TABLE t (a INTEGER);", f".ingest {warehouse}"):
            worked, _, err = run(shell, line, capsys)
            assert not worked and err.strip() == "error: the database is open read-only"
        assert run(shell, "SELECT count(*) FROM events;", capsys)[0]
    finally:
        shell.con.close()


def test_long_results_are_cut_with_a_note(state, capsys):
    run(state, ".maxrows 5", capsys)
    _, out, _ = run(state, "SELECT * FROM range(100);", capsys)
    assert "(100 rows, 5 shown)" in out and " 4 │" in out and " 5 │" not in out


def test_ctrl_c_interrupts_a_running_query(state, capsys):
    import _thread

    timer = threading.Timer(0.5, _thread.interrupt_main)  # what Ctrl-C does to the main thread
    timer.start()
    worked, _, err = run(state, "SELECT count(*) FROM range(10000000000) a, range(1000) b WHERE a.range + b.range = -1;", capsys)
    timer.join()
    assert not worked and "query cancelled" in err
    assert run(state, "SELECT 'usable after cancel';", capsys)[0]


def test_tall_results_go_through_the_pager_on_a_terminal(state, monkeypatch):
    import pydoc
    import sys

    from ctda_sql.shell.app import write

    paged = []
    monkeypatch.delenv("PAGER", raising=False)
    monkeypatch.delenv("MANPAGER", raising=False)
    monkeypatch.setattr(pydoc, "pager", paged.append)
    monkeypatch.setattr(sys, "stdout", _FakeTerminal())
    write(state, "\n".join(str(i) for i in range(500)))
    write(state, "short")
    assert len(paged) == 1 and sys.stdout.written == "short\n"


@pytest.mark.parametrize("pager", ["no-such-pager-ctda", "no-such-pager-ctda -R", "PAGER_X=1 no-such-pager-ctda",
                                   "sh -c 'exit 127'"])
def test_a_pager_that_cannot_run_still_shows_the_result_after_one_warning(state, monkeypatch, capsys, pager):
    """Issue 35 (Low): a $PAGER that does not exist lost the result (pydoc piped it to the
    shell's `not found`)."""
    import sys

    from ctda_sql.shell.app import write

    monkeypatch.setenv("PAGER", pager)
    monkeypatch.delenv("MANPAGER", raising=False)
    monkeypatch.setattr(sys, "stdout", _FakeTerminal())
    tall = "\n".join(f"row {i}" for i in range(500))
    write(state, tall)
    assert sys.stdout.written == tall + "\n"
    err = capsys.readouterr().err
    assert err.startswith(f"warning: pager {pager!r} ") and err.endswith("; the result follows\n")
    assert len(err.splitlines()) == 1


def test_a_pager_that_runs_gets_the_result(state, monkeypatch, tmp_path):
    import sys

    from ctda_sql.shell.app import write

    seen = tmp_path / "paged.txt"
    monkeypatch.setenv("PAGER", f"cat > {seen}")
    monkeypatch.setattr(sys, "stdout", _FakeTerminal())
    tall = "\n".join(f"row {i}" for i in range(500))
    write(state, tall)
    assert seen.read_text() == tall and sys.stdout.written == ""


class _FakeTerminal:
    written = ""

    def isatty(self):
        return True

    def write(self, text):
        self.written += text

    def flush(self):
        pass


def test_mode_and_output_inside_a_read_file_apply_to_the_lines_after_them(state, capsys, tmp_path):
    target = tmp_path / "second.csv"
    script = tmp_path / "script.sql"
    script.write_text(f".mode json\nSELECT 1 AS one;\n.mode csv\n.output {target}\nSELECT 2 AS two;\n.output stdout\n")
    _, out, _ = run(state, f".read {script}", capsys)
    assert '{"one": 1}' in out and "two" not in out
    assert target.read_text() == "two\n2\n"


def test_maxwidth_fits_tables_and_zero_lifts_the_limit(state, capsys):
    wide = "SELECT repeat('x', 200) AS a;"
    run(state, ".maxwidth 40", capsys)
    assert max(len(line) for line in run(state, wide, capsys)[1].splitlines()) == 40
    run(state, ".maxwidth 0", capsys)
    assert "x" * 200 in run(state, wide, capsys)[1]


def test_ingest_replace_and_analyze_options_work_in_the_shell(state, capsys, tmp_path):
    trace = write_trace(tmp_path, "train")  # the file the fixture already ingested
    worked, out, err = run(state, f".ingest {trace} --run train --replace", capsys)
    assert worked and "train.json" in out, err
    worked, out, err = run(state, ".analyze --run train --method ctda --no-split-starved --wait-gap-us 2", capsys)
    assert worked, err
    _, out, _ = run(state, "SELECT DISTINCT method FROM critical_path;", capsys)
    assert "ctda" in out and "per_thread" not in out


def test_schema_shows_the_description_of_a_table_and_its_columns(state, capsys):
    worked, out, err = run(state, ".schema events", capsys)
    assert worked, err
    assert "events: every traceEvent of every file" in out
    assert "position of the event in the file's traceEvents array" in out


def test_explain_prints_the_plan_as_duckdb_draws_it(state, capsys):
    for line in (".explain SELECT name, count(*) FROM events GROUP BY name;",
                 "EXPLAIN ANALYZE SELECT name, count(*) FROM events GROUP BY name;"):
        worked, out, err = run(state, line, capsys)
        assert worked, err
        assert "Total Time:" in out and "\\n" not in out and "explain_value" not in out


@pytest.mark.parametrize("name", ["top.csv", "top.tsv", "top.parquet", "top.json"])
def test_export_writes_a_result_in_the_format_its_name_says(state, capsys, tmp_path, name):
    import duckdb

    target = tmp_path / name
    worked, _, err = run(state, f".export {target} SELECT 'it''s' AS label, 2 AS n;", capsys)
    assert worked, err
    reader = {".csv": "read_csv", ".tsv": "read_csv", ".parquet": "read_parquet", ".json": "read_json"}[target.suffix]
    assert duckdb.sql(f"SELECT label, n FROM {reader}('{target}')").fetchall() == [("it's", 2)]


def test_export_refuses_a_name_without_a_known_format(state, capsys, tmp_path):
    worked, _, err = run(state, f".export {tmp_path / 'top.xlsx'} SELECT 1;", capsys)
    assert not worked and "cannot tell the format" in err and len(err.splitlines()) == 1


def test_open_switches_database_and_keeps_the_session(state, capsys, tmp_path):
    run(state, "CREATE TEMP TABLE notes AS SELECT 'kept' AS note;", capsys)
    other = tmp_path / "other.duckdb"
    worked, out, err = run(state, f".open {other}", capsys)
    assert worked and f"opened {other}" in out, err
    _, out, _ = run(state, "SELECT (SELECT count(*) FROM runs) AS runs, (SELECT note FROM notes) AS note;", capsys)
    assert "kept" in out and " 0 │" in out
    worked, _, err = run(state, f".open {tmp_path / 'missing.duckdb'} --read-only", capsys)
    assert not worked and "no database at" in err


# ---- issue 43 (first use 5): the DuckDB CLI's dot commands --------------------------------

def test_once_sends_only_the_next_result_to_the_file(state, capsys, tmp_path):
    target = tmp_path / "once.csv"
    run(state, ".mode csv", capsys)
    worked, out, err = run(state, f".once {target}", capsys)
    assert worked, err
    assert run(state, "SELECT 1 AS a;", capsys)[1] == ""
    assert run(state, "SELECT 2 AS b;", capsys)[1] == "b\n2\n"
    assert target.read_text() == "a\n1\n"


def test_once_takes_one_result_of_several_statements(state, capsys, tmp_path):
    target = tmp_path / "once.csv"
    run(state, ".mode csv", capsys)
    run(state, f".once {target}", capsys)
    assert run(state, "SELECT 1 AS a; SELECT 2 AS b;", capsys)[1] == "b\n2\n"
    assert target.read_text() == "a\n1\n"


@pytest.mark.parametrize("lines, out", [
    ([".headers off"], "1,,x\n"),
    ([".nullvalue (null)"], "a,b,c\n1,(null),x\n"),
    ([".separator ;"], "a;b;c\n1;;x\n"),
    ([".separator \\t"], "a\tb\tc\n1\t\tx\n"),
    ([".headers off", ".nullvalue NULL", ".separator |"], "1|NULL|x\n"),
    ([".separator ;", ".mode csv"], "a,b,c\n1,,x\n"),  # a mode sets its own separator again
])
def test_headers_nullvalue_and_separator_shape_csv(state, capsys, lines, out):
    run(state, ".mode csv", capsys)
    for line in lines:
        worked, _, err = run(state, line, capsys)
        assert worked, err
    assert run(state, "SELECT 1 AS a, NULL AS b, 'x' AS c;", capsys)[1] == out


def test_headers_and_separator_reach_the_results_of_dot_commands(state, capsys):
    for line in (".mode csv", ".headers off", ".separator ;"):
        run(state, line, capsys)
    assert run(state, ".help timer", capsys)[1].startswith(".timer;on|off;")


def test_csv_refuses_a_separator_of_more_than_one_character(state, capsys):
    run(state, ".mode csv", capsys)
    run(state, ".separator ' | '", capsys)
    worked, out, err = run(state, "SELECT 1 AS a;", capsys)
    assert not worked and err == "error: csv takes a one-character .separator, not ' | '; .mode list takes any\n"


@pytest.mark.parametrize("line, message", [
    (".headers maybe", "usage: .headers on|off"), (".nullvalue", "usage: .nullvalue TEXT"),
    (".separator", "usage: .separator SEP"), (".separator ''", "usage: .separator SEP (at least one character)"),
    (".once", "usage: .once FILE"),
])
def test_the_new_dot_commands_refuse_bad_arguments_in_one_line(state, capsys, line, message):
    worked, _, err = run(state, line, capsys)
    assert not worked and err == f"error: {message}\n"


def test_mode_takes_every_output_format(state, capsys):
    from ctda_sql.cli.output import FORMATS

    for fmt in FORMATS:
        worked, _, err = run(state, f".mode {fmt}", capsys)
        assert worked, err
        worked, out, err = run(state, "SELECT 1 AS a;", capsys)
        assert worked and out, (fmt, err)


def test_statements_are_cut_only_at_semicolons_outside_strings_and_comments():
    from ctda_sql.shell.runner import split_statements

    sql = "SELECT 'µ;s' AS a; -- c;d\n/* e;f */ SELECT $$x;y$$, \"q;r\";\n\n  SELEC 2;;\nSELECT 3"
    assert split_statements(sql, first_line=10) == [
        (10, "SELECT 'µ;s' AS a;"), (11, "SELECT $$x;y$$, \"q;r\";"), (13, "SELEC 2;"), (13, ";"), (14, "SELECT 3")]


def test_a_statement_after_a_syntax_error_in_one_input_does_not_run_but_those_before_do(state, capsys):
    worked, out, err = run(state, "SELECT 'first' AS a;\nSELEC 2;\nSELECT 'third' AS c;", capsys)
    assert not worked and "first" in out and "third" not in out
    assert err.splitlines()[:2] == ['error: Parser Error: syntax error at or near "SELEC"', "LINE 2: SELEC 2;"]
