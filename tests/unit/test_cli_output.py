"""What `ctda-sql query` and `report` print: streaming into pipes, tables fitted to a width,
exact JSON, DuckDB's hints, and clear errors for unknown or unanalysed runs."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from ctda_sql.core.connection import connect

from shell_helpers import ctda_command, write_trace


@pytest.fixture
def warehouse(tmp_path, run_cli, db_path):
    for run in ("alpha", "beta"):
        folder = tmp_path / run
        folder.mkdir()
        assert run_cli("ingest", "-q", str(write_trace(folder, run)), "--run", run).code == 0
    return db_path


def test_piped_query_streams_the_first_rows_without_reading_them_all(tmp_path):
    # 50M rows: rendering (or even fetching) them all before printing takes minutes
    command = ctda_command() + ["--db", str(tmp_path / "t.duckdb"), "query", "SELECT * FROM range(50000000) t(i)"]
    connect(tmp_path / "t.duckdb").close()
    started = time.monotonic()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        first_lines = [child.stdout.readline() for _ in range(3)]
        child.stdout.close()  # as `head` does
        child.wait(timeout=60)
        err = child.stderr.read()
    assert first_lines == ["i\n", "0\n", "1\n"]  # csv, the default into a pipe
    assert time.monotonic() - started < 30 and "Traceback" not in err


def test_piped_output_defaults_to_csv_and_a_terminal_format_can_be_asked_for(warehouse, run_cli):
    assert run_cli("query", "SELECT 1 AS a, 'x' AS b").out == "a,b\n1,x\n"
    assert run_cli("query", "SELECT 1 AS a, 'x' AS b", "-f", "tsv").out == "a\tb\n1\tx\n"
    assert "│ a │ b │" in run_cli("query", "SELECT 1 AS a, 'x' AS b", "-f", "table").out


def test_tables_show_the_first_rows_and_count_them_all(warehouse, run_cli):
    out = run_cli("query", "SELECT * FROM range(1000) t(i)", "-f", "table", "--max-rows", "5").out
    assert "(1,000 rows, 5 shown)" in out and "│ 4 │" in out and "│ 5 │" not in out


def test_tables_fit_the_width_cutting_text_and_dropping_middle_columns(warehouse, run_cli):
    wide_cells = "SELECT repeat('x', 300) AS a, repeat('y', 300) AS b"
    out = run_cli("query", wide_cells, "-f", "table", "--max-width", "60").out
    assert all(len(line) <= 60 for line in out.splitlines()) and "x…x" in out and "y…y" in out
    many = "SELECT " + ", ".join(f"{i} AS column_{i}" for i in range(40))
    out = run_cli("query", many, "-f", "table", "--max-width", "80").out
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "│ column_0 │" in out and "column_20 │" not in out and "│ … │" in out
    assert "(1 row; 34 columns hidden: column_6, column_7," in out  # how many, and which


def test_tables_never_cut_a_number_or_its_unit(warehouse, run_cli):
    # 8 columns at 80: the old fit cut every one to 6 characters ('52.05…', 'share…')
    sql = ("SELECT 'autograd::engine::evaluate_function: torch::autograd::AccumulateGrad' AS name, "
           "'cpu_op' AS category, 52051.5 AS path_us, 0.0902361 AS share_of_path, 0.0780161 AS share_of_total, "
           "52051.5 AS inclusive_us, 1590 AS occurrences, 3 AS windows")
    out = run_cli("query", sql, "-f", "table", "--max-width", "80").out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    name = lines[3].split("│")[1].strip()  # the middle of a long name goes; the slack is the name's
    assert name == "autograd::engine…d::AccumulateGrad"
    assert len(lines[0]) == 80
    assert "52.05 ms" in out and "share_of_path" in out and "0.0902361" in out
    assert "columns hidden: share_of_total, inclusive_us" in lines[-1]


def test_numbers_are_never_cut_even_when_their_headers_repeat_a_prefix(warehouse, run_cli):
    # the demo's cpcr table showed two columns both headed 'per_threa…'
    sql = ("SELECT 0 AS rank, 4 AS step, 222503.3 AS step_us, 192031.7 AS ctda_path_us, 0.863 AS ctda_cpcr, "
           "12170.1 AS per_thread_path_us, 0.055 AS per_thread_cpcr")
    out = run_cli("query", sql, "-f", "table", "--max-width", "80").out
    header = out.splitlines()[1]
    cells = [cell.strip() for cell in header.split("│")[1:-1]]
    assert "per_thread_path_us" in cells and len(header) <= 80
    assert all(cell == "…" or not cell.endswith("…") for cell in cells)


def test_descriptions_wrap_rather_than_being_cut(warehouse, run_cli):
    out = run_cli("report", "--list", "-f", "table", "--max-width", "80").out
    assert all(len(line) <= 80 for line in out.splitlines())
    words = " ".join(line.split("│")[2].strip() for line in out.splitlines() if line.count("│") == 4)
    assert "per rank, the clock offset estimated from matched collectives" in words


@pytest.mark.parametrize("fmt", ["table", "csv", "tsv", "json", "markdown", "line"])
def test_every_format_prints_every_digit(warehouse, run_cli, fmt):
    # markdown and line printed 1.00738e+06 for 1007380.5
    out = run_cli("query", "SELECT 1007380.5::DOUBLE AS x, 123456789.25::DOUBLE AS y, 1e20::DOUBLE AS z",
                  "-f", fmt).out
    assert "1007380.5" in out
    if fmt != "json":  # 1e+20 is JSON's exact spelling of that number
        assert "100000000000000000000" in out and "e+" not in out
    # tables round the fraction for reading (as the µs columns do), never a digit before the point
    assert ("123456789.2" if fmt == "table" else "123456789.25") in out


@pytest.mark.parametrize("fmt", ["csv", "tsv", "markdown", "line"])
def test_text_formats_print_no_float_noise(warehouse, run_cli, fmt):
    # csv, markdown and line printed a cpcr path_us as 192031.71500000008 and a summed
    # slack_after_us as 288.97200000000885
    sql = ("SELECT 192031.71500000008::DOUBLE AS path_us, 0.1::DOUBLE + 0.2::DOUBLE AS sum, "
           "288.97200000000885::DOUBLE AS slack_us, 1693334112345678.0::DOUBLE AS epoch_us, "
           "0.000012345::DOUBLE AS small, -7.5::DOUBLE AS negative")
    out = run_cli("query", sql, "-f", fmt).out
    assert "192031.715" in out and "00000" not in out and "99999" not in out
    assert "0.3" in out and "288.972" in out and "0.000012345" in out and "-7.5" in out
    assert "1693334112345678" in out  # every digit before the point stays


def test_json_keeps_every_digit_of_a_float(warehouse, run_cli):
    assert json.loads(run_cli("query", "SELECT 0.1::DOUBLE + 0.2::DOUBLE AS x", "-f", "json").out) == [
        {"x": 0.30000000000000004}]


def test_a_report_without_a_run_column_says_when_it_adds_up_several_runs(warehouse, run_cli):
    # hotspots given no run summed every run into one ranking, with nothing to say so
    assert run_cli("analyze", "-q", "--run", "alpha").code == 0
    assert run_cli("report", "hotspots").err == ""  # one analysed run: nothing added up
    assert run_cli("analyze", "-q", "--run", "beta").code == 0
    result = run_cli("report", "hotspots", "-f", "csv")
    assert result.code == 0 and result.out.startswith("name,category,path_us")
    assert result.err == ("note: hotspots adds up 2 runs as one (alpha, beta); for one run give "
                          "--param run=NAME (.report hotspots run=NAME in the shell)\n")
    assert run_cli("report", "hotspots", "-p", "run=alpha").err == ""
    assert run_cli("report", "cpcr").err == ""  # its rows name their run


HOSTILE = "it's <b>|</b>'); DROP TABLE t; --"
TWO_ROWS = (f"SELECT 1 AS a, '{HOSTILE.replace(chr(39), chr(39) * 2)}' AS \"b\"\"q\", NULL::INTEGER AS n, "
            "0.1::DOUBLE + 0.2::DOUBLE AS f, '2020-01-01 00:00:00.123456789'::TIMESTAMP_NS AS t "
            "UNION ALL SELECT 2, 'x', 3, 1.5, NULL ORDER BY a")


def test_jsonlines_prints_one_exact_object_a_line(warehouse, run_cli):
    out = run_cli("query", TWO_ROWS, "-f", "jsonlines").out
    assert [json.loads(line) for line in out.splitlines()] == [
        {"a": 1, 'b"q': HOSTILE, "n": None, "f": 0.30000000000000004, "t": "2020-01-01 00:00:00.123456789"},
        {"a": 2, 'b"q': "x", "n": 3, "f": 1.5, "t": None}]


def test_list_mode_separates_values_with_pipes_as_duckdb_does(warehouse, run_cli):
    out = run_cli("query", "SELECT 1 AS a, 'x' AS b, NULL AS c, 0.1::DOUBLE + 0.2::DOUBLE AS d", "-f", "list").out
    assert out == "a|b|c|d\n1|x|NULL|0.3\n"


def test_html_mode_escapes_every_name_and_value(warehouse, run_cli):
    from html.parser import HTMLParser

    out = run_cli("query", TWO_ROWS, "-f", "html").out
    assert out.startswith("<table>\n<tr><th>a</th><th>b&quot;q</th>") and out.endswith("</table>\n")
    assert "<b>" not in out and "&lt;b&gt;|&lt;/b&gt;" in out

    class Cells(HTMLParser):
        cells: list[str] = []

        def handle_data(self, data):
            if data.strip():
                self.cells.append(data)
    parser = Cells()
    parser.feed(out)
    assert parser.cells[:7] == ["a", 'b"q', "n", "f", "t", "1", HOSTILE]


def test_insert_mode_statements_load_back_the_same_values(warehouse, run_cli):
    import duckdb

    out = run_cli("query", TWO_ROWS, "-f", "insert").out
    assert out.startswith('INSERT INTO "table"("a", "b""q", "n", "f", "t") VALUES (1, \'it\'\'s <b>')
    con = duckdb.connect()
    con.execute(f'CREATE TABLE "table" AS {TWO_ROWS} LIMIT 0')
    con.execute(out)  # the quote in the text ends no literal: DROP TABLE runs nowhere
    assert con.execute(f'SELECT count(*) FROM (FROM ({TWO_ROWS}) EXCEPT ALL FROM "table")').fetchone() == (0,)
    assert con.execute('SELECT count(*), max(f) FROM "table"').fetchone() == (2, 1.5)


@pytest.mark.parametrize("fmt", ["jsonlines", "list", "html", "insert"])
def test_report_and_the_shell_accept_duckdbs_other_modes(warehouse, run_cli, fmt):
    from ctda_sql.shell.app import open_state, run_and_show

    result = run_cli("report", "runs", "-f", fmt)
    assert result.code == 0 and "alpha" in result.out and "beta" in result.out
    state = open_state(str(warehouse), read_only=True)
    try:
        assert run_and_show(state, f".mode {fmt}")
        assert state.mode == fmt and run_and_show(state, "SELECT 42 AS answer;")
    finally:
        state.con.close()


def _table_lines(columns, rows, width=80, keys=()):
    from ctda_sql.cli.output import render

    text = render(columns, rows, "table", width, keys=keys)
    assert max(len(line) for line in text.splitlines()) <= width
    return text.splitlines()


def _cells_of(line: str) -> list[str]:
    return [cell.strip() for cell in line.split("│")[1:-1]]


def test_the_list_of_hidden_columns_is_never_cut():
    # it printed 'between_n…' at 80 columns
    columns = ["name"] + [f"remainder_part_number_{i}_us" for i in range(12)]
    lines = _table_lines(columns, [("x", *range(12))])
    footer = " ".join(line for line in lines if not line.startswith(("┌", "│", "├", "└")))
    hidden = [c for c in columns if c not in _cells_of(lines[1])]
    assert len(hidden) == 10 and f"10 columns hidden: {', '.join(hidden)})" in footer and "…" not in footer


def test_key_columns_stay_when_others_go():
    columns = ["run", "step", "pg", "seq", "name", "bytes", "last_rank", "skew_us", "wait_us_by_rank",
               "total_wait_us", "ranks"]
    row = ("demo", 4, "0", 1, "allreduce", 8196000, 1, 512.5, "[0.0, 512.5, 3.25, 44.0]", 560.0, "[0, 1, 2, 3]")
    assert {"last_rank", "skew_us"} <= set(_cells_of(_table_lines(columns, [row], 60, ["last_rank", "skew_us"])[1]))
    assert "skew_us" not in _cells_of(_table_lines(columns, [row], 60)[1])  # what it did before keys


def test_a_what_if_speedup_stays_when_the_run_name_is_long():
    columns = ["run", "rank", "step", "measured_us", "replay_us", "predicted_us", "speedup"]
    row = ("two_ranks_foreach_mul_removed_on_rank_1", 1, 552, 452031.5, 452031.5, 486000.25, 0.93)
    header = _cells_of(_table_lines(columns, [row])[1])
    assert "speedup" in header and "two_ranks_foreach_mul_removed_on_rank_1" in _table_lines(columns, [row])[3]


def test_notes_and_reasons_wrap_rather_than_being_cut():
    reason = "no other rank of its group in the run, and its sequence number is not matched on rank 3"
    lines = _table_lines(["run", "rank", "step", "name", "reason"], [("demo", 0, 4, "broadcast", reason)], 60)
    words = " ".join(_cells_of(line)[-1] for line in lines[3:-2])
    assert words == reason and "…" not in words


def test_long_cpp_names_lose_their_template_arguments_and_alike_ones_are_numbered():
    # a middle cut printed 'void split_emb…, float, long)' for two different kernels, one
    # 'added' and one 'removed'
    added = ("void split_embedding_backward_codegen_sgd_unweighted_kernel_warp_per_row_1<float, float, long>"
             "(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>, float, long)")
    removed = added.replace("<float, float, long>", "<c10::Half, float, long>", 1)
    lines = _table_lines(["name", "count_a", "count_b", "total_us_a", "total_us_b", "diff_us", "change"],
                         [(added, 0, 1, 0.0, 52.5, 52.5, "added"), (removed, 1, 0, 51.25, 0.0, -51.25, "removed")],
                         keys=["diff_us", "change"])
    names = [_cells_of(line)[0] for line in lines[3:5]]
    assert names[0] != names[1] and all("<…>" in name for name in names)
    assert [name[-3:] for name in names] == ["[1]", "[2]"]
    short = _table_lines(["name", "n"], [("Memcpy DtoD (Device -> Device)", 1), ("void f<int>(int)", 2)], 40)
    assert "Memcpy DtoD (Device -> Device)" in short[3] and "void f<int>(int)" in short[4]  # nothing to cut


def test_a_table_narrower_than_its_names_still_shows_them_cut():
    rows = [("void f<int>(int) called from a long place", 1), ("void f<long>(int) called from a long place", 2)]
    lines = _table_lines(["name", "v"], rows, 30)
    assert [_cells_of(line)[0][-3:] for line in lines[3:5]] == ["[1]", "[2]"]
    assert _cells_of(_table_lines(["n", "v"], rows, 12)[3]) == ["f…ce", "…"]  # too narrow to number: it still fits


def test_report_errors_read_like_the_projects_own(warehouse, run_cli):
    result = run_cli("report", "run_diff")
    assert result.code == 1 and result.err.strip() == "error: run_diff needs run_a and run_b"


def test_report_list_shows_each_parameters_type_default_and_help(warehouse, run_cli):
    import csv
    import io

    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(run_cli("report", "--list", "-f", "csv").out))}
    assert "top INTEGER = 20: rows to keep" in rows["hotspots"]["params"].splitlines()
    assert "method VARCHAR = ctda: ctda or per_thread" in rows["hotspots"]["params"].splitlines()


def test_tables_follow_the_columns_variable_by_default(warehouse, run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "50")
    out = run_cli("query", "SELECT repeat('x', 300) AS a", "-f", "table").out
    assert max(len(line) for line in out.splitlines()) == 50


@pytest.mark.parametrize("args", [("query", "SELECT 1", "--max-width", "-1"), ("query", "SELECT 1", "--max-rows", "-2"),
                                  ("report", "runs", "--max-width", "wide"), ("whatif", "--max-width", "-3")])
def test_a_negative_or_non_numeric_width_or_row_count_is_refused(warehouse, run_cli, capsys, args):
    # the settings file already refuses these; on the command line they printed a table with
    # no column shown
    with pytest.raises(SystemExit) as exit_info:
        run_cli(*args)
    assert exit_info.value.code == 2
    assert "is not a whole number of 0 or more" in capsys.readouterr().err


def test_json_keeps_exact_values(warehouse, run_cli):
    sql = ("SELECT 123456789012345678901234567890::HUGEINT AS big, 1.10::DECIMAL(10, 2) AS price, "
           "'2020-01-01 00:00:00.123456789'::TIMESTAMP_NS AS at, '{\"k\": [1, 2]}'::JSON AS doc, 0.1 AS f")
    out = run_cli("query", sql, "-f", "json").out
    assert '"big": 123456789012345678901234567890' in out and '"price": 1.10' in out
    assert json.loads(out) == [{"big": 123456789012345678901234567890, "price": 1.10,
                                "at": "2020-01-01 00:00:00.123456789", "doc": {"k": [1, 2]}, "f": 0.1}]


def test_json_of_no_rows_is_an_empty_array(warehouse, run_cli):
    assert json.loads(run_cli("query", "SELECT 1 AS a WHERE false", "-f", "json").out) == []


@pytest.mark.parametrize("command", [("query", "SELECT * FROM event"),
                                     ("report", "echo", "--reports", "{reports}")])
def test_duckdb_did_you_mean_hints_are_kept(warehouse, run_cli, tmp_path, command):
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "echo.sql").write_text("-- name: echo\nSELECT * FROM event\n")
    result = run_cli(*(word.format(reports=reports) for word in command))
    assert result.code == 1
    assert result.err.strip() == 'error: Catalog Error: Table with name event does not exist! Did you mean "events"?'


def test_a_report_on_an_unknown_run_names_the_runs(warehouse, run_cli):
    result = run_cli("report", "runs", "-p", "run=gamma")
    assert result.code == 1 and result.err.strip() == "error: no run named 'gamma'; runs: alpha, beta"
    assert run_cli("report", "run_diff", "-p", "run_a=alpha", "-p", "run_b=nope").code == 1


def test_a_report_on_critical_paths_of_an_unanalysed_run_names_the_command(warehouse, run_cli):
    result = run_cli("report", "hotspots", "-p", "run=alpha")
    assert result.code == 1 and "run 'alpha' has not been analysed" in result.err
    assert "ctda-sql analyze --run alpha" in result.err
    assert "no run has been analysed" in run_cli("report", "cpcr").err
    assert run_cli("analyze", "-q", "--run", "alpha").code == 0
    assert run_cli("report", "hotspots", "-p", "run=alpha").code == 0
    assert "run 'beta' has not been analysed" in run_cli("report", "hotspots", "-p", "run=beta").err


def test_progress_bars_stay_off_when_stderr_is_not_a_terminal(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    write_trace(ranks, "rank0", rank=0, world_size=2), write_trace(ranks, "rank1", rank=1, world_size=2)
    done = subprocess.run(ctda_command() + ["--db", str(tmp_path / "t.duckdb"), "ingest", str(ranks)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", repr(done.stderr)


def _ranks(folder, step_us: tuple[int, ...]):
    from ctda_sql.testing.tracebuilder import TraceBuilder

    folder.mkdir()
    for rank, dur in enumerate(step_us):
        builder = TraceBuilder(rank=rank, world_size=len(step_us))
        builder.step(1, builder.thread(1, "pt_main_thread"), ts=0, dur=dur)
        builder.write(folder / f"rank-{rank}.json")
    return folder


@pytest.mark.parametrize("step_us, flagged", [((100, 100, 150), [False, False, True]),
                                              ((100, 104), [False, False]),
                                              ((100, 100, 100, 100, 100, 100, 400), [False] * 6 + [True])])
def test_stragglers_can_flag_a_rank_in_a_small_run_and_say_by_which_rule(run_cli, tmp_path, step_us, flagged):
    # with |z| <= sqrt(ranks - 1), z > 2 could flag no one below 6 ranks: 150 among 100s went unseen
    assert run_cli("ingest", "-q", str(_ranks(tmp_path / "r", step_us)), "--run", "job").code == 0
    rows = json.loads(run_cli("report", "stragglers", "-p", "run=job", "-f", "json").out)
    assert [r["straggler"] for r in rows] == flagged
    small = len(step_us) < 6
    assert all(("above the median" in r["rule"]) == small and "waiting_on" in r["rule"] for r in rows)


def test_a_real_kineto_trace_ingests_without_warnings_unless_verbose(run_cli, tmp_path):
    from importlib import resources

    # every real trace has string pid/tid lanes and flow ends without a start: not worth a warning
    with resources.as_file(resources.files("ctda_sql") / "data/nccl.json.gz") as trace:
        quiet = run_cli("ingest", "-q", str(trace), "--run", "plain")
        verbose = run_cli("ingest", "-q", "--verbose", str(trace), "--run", "plain", "--replace")
    assert quiet.code == 0 and quiet.err == ""
    assert "string pid/tid lanes" in verbose.err and "flow ends without a start" in verbose.err


def test_a_lone_file_shows_its_stages_on_a_terminal(tmp_path):
    # a single 19 MB .gz took 5-9 s with a blank screen; the stages show once the parse has
    # taken about a second (0 here, so that a small file shows them too)
    import pexpect

    trace = write_trace(tmp_path, "lone")
    command = ctda_command() + ["--db", str(tmp_path / "t.duckdb"), "ingest", str(trace)]
    child = pexpect.spawn(command[0], command[1:], encoding="utf-8", timeout=120, dimensions=(24, 100),
                          env={**os.environ, "CTDA_PROGRESS_DELAY_S": "0"})
    child.expect(r"lone\.json: typing the events \([\d.,]+ MB\)")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and "run 'lone': 1 loaded" in child.before
