"""The shell end to end under a real terminal (pexpect): prompt, query, output, .quit."""

from __future__ import annotations

import shutil
import sys
import time

import pytest

pexpect = pytest.importorskip("pexpect")

# the space after the prompt arrives as a cursor movement, not a character
PROMPT = "ctda>"


def at_prompt(child, line: str | None) -> None:
    """Wait for the prompt, give prompt_toolkit a moment to start reading keys, then type."""
    child.expect(PROMPT)
    time.sleep(0.3)
    if line is None:
        child.sendeof()
    else:
        child.sendline(line)


def spawn_shell(db, *words):
    executable = shutil.which("ctda-sql")
    command, args = (executable, []) if executable else (sys.executable, ["-m", "ctda_sql.shell.entry"])
    return pexpect.spawn(command, [*args, "--db", str(db), *words], encoding="utf-8",
                         timeout=30, dimensions=(40, 120))


@pytest.mark.parametrize("words", [("shell",), ()], ids=["shell", "no-command"])
def test_query_and_quit_in_a_real_terminal(tmp_path, terminal_env, words):
    child = spawn_shell(tmp_path / "t.duckdb", *words)
    at_prompt(child, "SELECT 40 + 2 AS answer;")
    child.expect("42")
    child.expect(r"\(1 row\)")
    at_prompt(child, "SELEC oops;")
    child.expect("Parser Error")
    at_prompt(child, ".quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_read_only_shell_refuses_writes(tmp_path, terminal_env):
    db = tmp_path / "t.duckdb"
    from ctda_sql.core.connection import connect

    connect(db).close()
    child = spawn_shell(db, "shell", "--read-only")
    child.expect("read-only")
    at_prompt(child, "CREATE TABLE t (a INTEGER);")
    child.expect("the database is open read-only")
    at_prompt(child, None)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_r_finds_an_earlier_statement_and_enter_runs_it(tmp_path, terminal_env):
    child = spawn_shell(tmp_path / "t.duckdb")
    at_prompt(child, "SELECT 'needle' || 'found' AS hit;")
    child.expect("needlefound")
    at_prompt(child, "SELECT 'other' AS x;")
    child.expect("other")
    child.expect(PROMPT)
    time.sleep(0.3)
    child.send("\x12")  # Ctrl-R
    time.sleep(0.3)
    child.send("needle")
    child.expect("needle': ")  # the search line shows what it found while you type
    child.expect("found")
    time.sleep(0.3)
    child.send("\r")  # one Enter takes the match and runs it (issue 35, Low: it took two)
    child.expect("needlefound")
    child.expect(r"\(1 row\)")
    at_prompt(child, None)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
