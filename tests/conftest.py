"""Shared fixtures: a CLI runner, temporary databases, the trace builder and the shared traces."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctda_sql.shell.entry import main as cli_main
from ctda_sql.core.connection import connect
from ctda_sql.testing.tracebuilder import TraceBuilder

DATA = Path(__file__).parent / "data"


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture
def run_cli(capsys, db_path, monkeypatch):
    """Run `ctda-sql ARGS...` in-process against the test database; returns CliResult."""

    def run(*args: str, stdin: str | None = None, db: Path | None = None) -> CliResult:
        if stdin is not None:
            import io

            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = cli_main(["--db", str(db or db_path), *args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def terminal_env(tmp_path, monkeypatch):
    """Environment for driving the shell under pexpect: private history, no pager prompts."""
    monkeypatch.setenv("CTDA_HISTORY", str(tmp_path / "history"))
    monkeypatch.setenv("PAGER", "cat")
    monkeypatch.setenv("TERM", "xterm")
    # pexpect does not answer cursor position requests; tell prompt_toolkit not to ask
    monkeypatch.setenv("PROMPT_TOOLKIT_NO_CPR", "1")


@pytest.fixture
def builder() -> TraceBuilder:
    return TraceBuilder(rank=0)


@pytest.fixture
def open_db(db_path):
    """Open the test database (after the CLI wrote it)."""
    connections = []

    def _open(read_only: bool = True):
        con = connect(db_path, read_only=read_only)
        connections.append(con)
        return con

    yield _open
    for con in connections:
        con.close()


def _shared_traces_dir() -> Path | None:
    value = os.environ.get("CTDA_TRACES")
    if not value:
        return None
    path = Path(value)
    if not path.is_dir():
        raise pytest.UsageError(f"CTDA_TRACES={value} is set but is not a folder")
    return path


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The real traces folder from $CTDA_TRACES; skips when unset, fails when missing."""
    path = _shared_traces_dir()
    if path is None:
        pytest.skip("CTDA_TRACES is not set (real-trace tier)")
    return path


def pytest_configure(config):
    # fail the whole run early and loudly when the variable points nowhere
    _shared_traces_dir()
