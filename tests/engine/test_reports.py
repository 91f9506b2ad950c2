"""Saved reports: header parsing, bound and validated parameters, users' folders shadowing."""

from __future__ import annotations

import json
import os

import pytest

from ctda_sql.core.errors import CtdaError
from ctda_sql.engine.reports import all_reports, find_report, parse_report

HEADER = """-- name: echo
-- description: echoes its parameters
-- param: label VARCHAR = hello  a word
-- param: count INTEGER = 3  how many
-- param: ratio DOUBLE  a fraction
-- param: loud BOOLEAN = false  shout
SELECT $label AS label, $count AS count, $ratio AS ratio, $loud AS loud;
"""


@pytest.fixture(autouse=True)
def no_configured_reports(monkeypatch):
    monkeypatch.delenv("CTDA_REPORTS", raising=False)


@pytest.fixture
def user_reports(tmp_path):
    folder = tmp_path / "my_reports"
    folder.mkdir()
    (folder / "echo.sql").write_text(HEADER)
    return folder


@pytest.fixture
def empty_db(run_cli, db_path):
    from ctda_sql.core.connection import connect

    connect(db_path).close()
    return db_path


def test_header_declares_name_description_and_typed_params():
    report = parse_report(HEADER, "echo.sql", "fallback")
    assert (report.name, report.description) == ("echo", "echoes its parameters")
    assert [(p.name, p.type, p.default) for p in report.params] == [
        ("label", "VARCHAR", "hello"), ("count", "INTEGER", 3), ("ratio", "DOUBLE", None), ("loud", "BOOLEAN", False)]
    assert report.params[1].help == "how many"


def test_header_declares_key_columns_and_a_report_without_the_line_has_none():
    report = parse_report("-- name: k\n-- key: a, b ,c\nSELECT 1 AS a, 2 AS b, 3 AS c;\n", "k.sql", "k")
    assert report.keys == ["a", "b", "c"]
    assert parse_report(HEADER, "echo.sql", "echo").keys == []


def test_a_report_without_key_columns_prints_its_table(user_reports, empty_db, run_cli):
    result = run_cli("report", "echo", "--reports", str(user_reports), "-f", "table", "--max-width", "40")
    assert result.code == 0 and "hello" in result.out and result.err == ""


def test_values_are_converted_to_the_declared_types():
    report = parse_report(HEADER, "echo.sql", "echo")
    bound = report.bind({"count": "7", "ratio": "0.5", "loud": "yes", "label": "NULL"})
    assert bound == {"label": None, "count": 7, "ratio": 0.5, "loud": True}


@pytest.mark.parametrize("given, message", [
    ({"count": "seven"}, "parameter count must be INTEGER, got 'seven'"),
    ({"ratio": "half"}, "parameter ratio must be DOUBLE"),
    ({"loud": "maybe"}, "parameter loud must be BOOLEAN"),
    ({"colour": "red"}, "report echo has no parameter 'colour' (parameters: label, count, ratio, loud)"),
])
def test_bad_values_and_unknown_parameters_are_refused(given, message):
    with pytest.raises(CtdaError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_report(HEADER, "echo.sql", "echo").bind(given)


def test_an_unknown_declared_type_is_an_error():
    with pytest.raises(CtdaError, match="unknown type BLOB"):
        parse_report("-- param: x BLOB\nSELECT 1", "bad.sql", "bad")


def test_name_falls_back_to_the_file_name():
    assert parse_report("SELECT 1", "plain.sql", "plain").name == "plain"


def test_list_shows_bundled_and_user_reports(run_cli, user_reports):
    result = run_cli("report", "--list", "--reports", str(user_reports), "--format", "json")
    names = {row["name"]: row for row in json.loads(result.out)}
    assert {"runs", "hotspots_by_experiment", "echo"} <= set(names)
    assert names["echo"]["params"].startswith("label VARCHAR")


def test_report_runs_with_bound_parameters(run_cli, user_reports, empty_db):
    result = run_cli("report", "echo", "--reports", str(user_reports), "-p", "count=2", "-p", "label=it's", "-f", "json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == [{"label": "it's", "count": 2, "ratio": None, "loud": False}]


def test_parameters_are_bound_not_pasted(run_cli, user_reports, empty_db):
    result = run_cli("report", "echo", "--reports", str(user_reports), "-p", "label='; DROP TABLE runs; --", "-f", "json")
    assert json.loads(result.out)[0]["label"] == "'; DROP TABLE runs; --"
    assert run_cli("query", "SELECT count(*) AS n FROM runs").code == 0  # the table survived


def test_cli_refuses_unknown_parameters_and_bad_types(run_cli, user_reports, empty_db):
    unknown = run_cli("report", "echo", "--reports", str(user_reports), "-p", "colour=red")
    bad = run_cli("report", "echo", "--reports", str(user_reports), "-p", "count=many")
    assert unknown.code == bad.code == 1
    assert "has no parameter 'colour'" in unknown.err and "must be INTEGER" in bad.err


def test_user_reports_shadow_bundled_ones(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "runs.sql").write_text("-- name: runs\n-- description: my runs\nSELECT 1 AS mine;\n")
    assert find_report("runs").source == "queries/runs.sql"
    assert find_report("runs", [folder]).description == "my runs"


def test_later_folders_win(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, text in ((first, "first"), (second, "second")):
        folder.mkdir()
        (folder / "r.sql").write_text(f"-- description: {text}\nSELECT 1;\n")
    assert find_report("r", [first, second]).description == "second"


def test_ctda_reports_setting_adds_folders(tmp_path, monkeypatch, user_reports):
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("CTDA_REPORTS", os.pathsep.join([str(user_reports), str(other)]))
    assert "echo" in all_reports()


def test_cli_folders_shadow_the_setting(tmp_path, monkeypatch, user_reports):
    mine = tmp_path / "cli"
    mine.mkdir()
    (mine / "echo.sql").write_text("-- name: echo\n-- description: from the command line\nSELECT 1;\n")
    monkeypatch.setenv("CTDA_REPORTS", str(user_reports))
    assert find_report("echo", [mine]).description == "from the command line"


def test_missing_folder_and_unknown_report_are_clear_errors(run_cli, tmp_path):
    missing = run_cli("report", "--list", "--reports", str(tmp_path / "nowhere"))
    unknown = run_cli("report", "nosuch")
    assert "reports folder" in missing.err and "does not exist" in missing.err
    assert "no report named 'nosuch'" in unknown.err


def test_user_report_and_query_can_call_the_python_udfs(tmp_path, run_cli, empty_db):
    # one-shot commands register only the UDFs their SQL names: these must still find fmt_us
    (tmp_path / "durations.sql").write_text("-- name: durations\nSELECT fmt_us(1500) AS shown;\n")
    result = run_cli("report", "durations", "--reports", str(tmp_path), "--format", "json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == [{"shown": "1.5 ms"}]
    result = run_cli("query", "SELECT FMT_US(2500000) AS shown", "--format", "csv")
    assert result.out.splitlines() == ["shown", "2.5 s"]


def test_udfs_are_registered_only_when_named():
    import duckdb

    from ctda_sql.udfs import register_named_in

    con = duckdb.connect()
    assert register_named_in(con, "SELECT 1 AS fmt_used") == []
    assert register_named_in(con, "SELECT fmt_us(3) AS x") == ["fmt_us"]
    assert con.execute("SELECT fmt_us(3)").fetchone() == ("3 µs",)
