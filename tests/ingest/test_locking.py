"""Several ctda-sql processes on one database: an idle shell locks nobody out, and when two
writers do collide the message names the holder and gives advice that works."""

from __future__ import annotations

import os
import subprocess

import duckdb
import pytest

from shell_helpers import ctda_command, write_trace

pexpect = pytest.importorskip("pexpect")
PROMPT = "ctda>"


def ctda(db, *words: str):
    return subprocess.run([*ctda_command(), "--db", str(db), *words], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def type_at_prompt(child, line: str) -> None:
    import time

    child.expect(PROMPT)
    time.sleep(0.3)
    child.sendline(line)


def test_an_idle_shell_lets_other_processes_ingest_and_keeps_its_temp_tables(tmp_path, terminal_env):
    db = tmp_path / "t.duckdb"
    assert ctda(db, "ingest", "-q", str(write_trace(tmp_path, "first")), "--run", "first").returncode == 0
    command = ctda_command()
    child = pexpect.spawn(command[0], [*command[1:], "--db", str(db)], encoding="utf-8", timeout=30,
                          dimensions=(40, 120))
    type_at_prompt(child, "CREATE TEMP TABLE mine AS SELECT 42 AS kept;")
    child.expect(r"\(1 row\)")
    # the shell sits at its prompt while another terminal ingests and reports
    second = ctda(db, "ingest", "-q", str(write_trace(tmp_path, "second")), "--run", "second")
    assert second.returncode == 0, second.stderr
    assert ctda(db, "report", "runs", "-f", "csv").stdout.count("\n") == 3
    type_at_prompt(child, "SELECT count(*) * 1000 + max(kept) AS both_seen FROM runs, mine;")
    child.expect("2042")
    type_at_prompt(child, ".quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_colliding_writers_are_told_who_holds_the_database(tmp_path):
    db = tmp_path / "t.duckdb"
    assert ctda(db, "ingest", "-q", str(write_trace(tmp_path, "first"))).returncode == 0
    holder = duckdb.connect(str(db))  # another program keeps the file open for writing
    try:
        for words in (("ingest", "-q", str(write_trace(tmp_path, "second"))), ("query", "SELECT 1")):
            done = ctda(db, *words)
            assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
            assert f"in use by process {os.getpid()} (" in done.stderr
            assert "--read-only" not in done.stderr and "retry when" in done.stderr
    finally:
        holder.close()
