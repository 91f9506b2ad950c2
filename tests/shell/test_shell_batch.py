"""The shell fed from a pipe or a file (`ctda-sql < queries.sql`), as `duckdb` and `sqlite3`
are: statements run as a batch, and a failing one stops it with a non-zero exit status."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from ctda_sql.core.connection import connect

from shell_helpers import ctda_command, write_trace


def ctda(db, *words: str, stdin: str = ""):
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


def test_dot_commands_in_a_batch_change_the_lines_after_them(db, tmp_path):
    target = tmp_path / "out.json"
    done = ctda(db, stdin=f".mode json\nSELECT 1 AS a;\n.output {target}\nSELECT 2 AS b;\n")
    assert done.returncode == 0 and done.stdout == '[\n  {"a": 1}\n]\n'
    assert target.read_text() == '[\n  {"b": 2}\n]\n'


def test_did_you_mean_hints_reach_the_shell(db):
    connect(db).execute("CREATE TABLE things (a INTEGER)").close()
    done = ctda(db, stdin="SELECT * FROM thing;\n")
    assert 'Did you mean "things"?' in done.stderr.splitlines()[0]


def test_a_failing_statement_stops_the_batch_with_exit_status_1_naming_its_line(db):
    done = ctda(db, "shell", stdin="CREATE TABLE t AS SELECT 1 AS a;\nSELECT * FROM nosuch;\nSELECT 'after' AS c;\n")
    assert done.returncode == 1 and "after" not in done.stdout
    assert done.stderr.startswith("error: near line 2: Catalog Error: Table with name nosuch does not exist!")


def test_a_syntax_error_stops_the_batch_there_and_keeps_what_ran_before(db):
    """Issue 43 (first use 5): one syntax error anywhere meant nothing ran; the DuckDB CLI
    runs the statements before it and names the one that failed."""
    script = "CREATE TABLE t AS SELECT 1 AS a;\nSELECT 'before' AS b;\n\n  SELEC 2;\nSELECT 'after' AS c;\n"
    done = ctda(db, stdin=script)
    assert done.returncode == 1 and "before" in done.stdout and "after" not in done.stdout
    assert done.stderr.splitlines() == ['error: near line 4: Parser Error: syntax error at or near "SELEC"',
                                        "LINE 4: SELEC 2;", "        ^^^^^"]
    assert connect(db).execute("SELECT a FROM t").fetchall() == [(1,)]


def test_a_syntax_error_after_a_dot_command_counts_lines_from_the_start(db):
    done = ctda(db, stdin="SELECT 1 AS a;\n.mode json\nSELECT 2 AS b; SELECT 'x;y' -- ;\n  + ;\n")
    assert done.returncode == 1 and done.stdout == 'a\n1\n[\n  {"b": 2}\n]\n'
    assert done.stderr.startswith("error: near line 3: ") and "LINE 4:" in done.stderr


def test_a_batch_piped_into_head_exits_0_quietly(db, tmp_path):
    """Issue 43 (first use 5): `| head` printed 'Broken pipe' and exited 1."""
    err = tmp_path / "err"
    with err.open("w") as errors:
        shell = subprocess.Popen([*ctda_command(), "--db", str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=errors, text=True)
        shell.stdin.write("SELECT * FROM range(3000000);\nSELECT 'next' AS x;\n")
        shell.stdin.close()
        assert shell.stdout.readline() == "range\n"
        shell.stdout.close()  # what `head -1` does once it has its line
        assert shell.wait(timeout=120) == 0
    assert err.read_text() == ""


# ---- the DuckDB CLI's flags -----------------------------------------------------------------

@pytest.mark.parametrize("words, out", [
    (("-csv", "-c", "SELECT 1 AS a, 'x' AS b"), "a,b\n1,x\n"),
    (("-json", "-c", "SELECT 1 AS a"), '[\n  {"a": 1}\n]\n'),
    (("-line", "-c", "SELECT 1 AS a, 2 AS bb"), "***** row 1 *****\n a: 1\nbb: 2\n"),
    (("-markdown", "-c", "SELECT 1 AS a"), "| a |\n|---|\n| 1 |\n"),
    (("-c", "SELECT 1 AS a", "-c", "SELECT 2 AS b"), "a\n1\nb\n2\n"),
    (("shell", "-c", ".mode json", "-csv", "-c", "SELECT 3 AS c"), '[\n  {"c": 3}\n]\n'),
])
def test_duckdb_cli_flags_on_the_bare_entry(db, words, out):
    """Issue 43 (first use 5): `ctda-sql -csv -c "select 1"`, as `duckdb` has it."""
    done = ctda(db, *words, stdin="SELECT 'stdin is not read' AS no;\n")
    assert (done.returncode, done.stdout, done.stderr) == (0, out, "")


def test_a_mode_flag_sets_the_mode_of_a_piped_batch(db):
    assert ctda(db, "-json", stdin="SELECT 1 AS a;\n").stdout == '[\n  {"a": 1}\n]\n'


def test_c_stops_at_a_failing_statement_with_exit_status_1(db):
    done = ctda(db, "-c", "SELECT 1 AS a; SELEC", "-c", "SELECT 2 AS b")
    assert done.returncode == 1 and done.stdout == "a\n1\n" and done.stderr.startswith("error: near line 1: Parser")


def test_the_flags_belong_to_the_shell_only(db):
    done = ctda(db, "query", "-c", "SELECT 1")
    assert done.returncode == 2 and "unrecognized arguments: -c" in done.stderr


# ---- docs/shell.md's batch examples run as written ---------------------------------------------

def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S)


def test_the_batch_examples_of_the_shell_doc_run(tmp_path, monkeypatch):
    """Issue 43 (first use 6): the example selected a column `n_ranks` that runs never had."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "shell.md").read_text(encoding="utf-8")
    blocks = [block for block in _bash_blocks(doc) if "ctda-sql --db runs.duckdb" in block]
    assert len(blocks) >= 2
    db = tmp_path / "runs.duckdb"
    for words in (("ingest", "-q", str(write_trace(tmp_path)), "--run", "nightly"), ("analyze", "-q")):
        assert subprocess.run([*ctda_command(), "--db", str(db), *words], capture_output=True, timeout=120).returncode == 0
    command = ctda_command()
    prelude = f"ctda-sql() {{ {' '.join(shlex.quote(w) for w in command)} \"$@\"; }}\nset -e -o pipefail\n"
    for block in blocks:
        done = subprocess.run(["bash", "-c", prelude + block], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and done.stderr == "" and done.stdout, (block, done.stderr)


def test_shell_help_lists_the_duckdb_flags(db):
    done = ctda(db, "shell", "--help")
    assert done.returncode == 0 and "-c SQL" in done.stdout and "-csv, -json, -line, -markdown" in done.stdout


@pytest.mark.parametrize("argv, expected", [
    (["--db", "x", "-csv", "-c", "SELECT 1"], (["--db", "x"], ["SELECT 1"], "csv")),
    (["shell", "--lake", "L", "-json"], (["shell", "--lake", "L"], None, "json")),
    (["--db", "-c"], (["--db", "-c"], None, None)),  # -c is the database's name here
    (["ingest", "-c", "x"], (["ingest", "-c", "x"], None, None)),  # another command: argparse judges
    (["-c"], (["-c"], None, None)),
])
def test_which_words_are_the_duckdb_flags(argv, expected):
    from ctda_sql.shell.entry import duckdb_flags

    assert duckdb_flags(argv) == expected
