"""The shell fed from a pipe or a file (`ctda-sql < queries.sql`), as `duckdb` and `sqlite3`
are: statements run as a batch, and a failing one stops it with a non-zero exit status."""

from __future__ import annotations

import subprocess

import pytest
from shell_helpers import ctda_command

from ctda_sql.core.connection import connect


def ctda(db, *words: str, stdin: str):
    return subprocess.run([*ctda_command(), "--db", str(db), *words], input=stdin, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "t.duckdb"
    connect(path).close()
    return path


@pytest.mark.parametrize("words", [("shell",), ()], ids=["shell", "no-command"])
def test_piped_statements_run_as_a_batch_in_csv(db, words):
    done = ctda(db, *words, stdin="SELECT 1 AS a;\nSELECT 'x' AS b\n  UNION ALL SELECT 'y';\n")
    assert (done.returncode, done.stdout, done.stderr) == (0, "a\n1\nb\nx\ny\n", "")


def test_a_failing_statement_stops_the_batch_with_exit_status_1(db):
    done = ctda(db, "shell", stdin="CREATE TABLE t AS SELECT 1 AS a;\nSELECT * FROM nosuch;\nSELECT 'after' AS c;\n")
    assert done.returncode == 1 and "after" not in done.stdout
    assert done.stderr.startswith("error: Catalog Error: Table with name nosuch does not exist!")


def test_dot_commands_in_a_batch_change_the_lines_after_them(db, tmp_path):
    target = tmp_path / "out.json"
    done = ctda(db, stdin=f".mode json\nSELECT 1 AS a;\n.output {target}\nSELECT 2 AS b;\n")
    assert done.returncode == 0 and done.stdout == '[\n  {"a": 1}\n]\n'
    assert target.read_text() == '[\n  {"b": 2}\n]\n'


def test_did_you_mean_hints_reach_the_shell(db):
    connect(db).execute("CREATE TABLE things (a INTEGER)").close()
    done = ctda(db, stdin="SELECT * FROM thing;\n")
    assert 'Did you mean "things"?' in done.stderr.splitlines()[0]
