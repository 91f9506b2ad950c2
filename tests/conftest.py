"""Shared fixtures: a CLI runner, temporary databases, the trace builder and the shared traces."""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctda_sql.shell.entry import main as cli_main
from ctda_sql.core.connection import connect
from ctda_sql.testing.tracebuilder import TraceBuilder
from helpers.db import analysed_db
from helpers.jobs import p2p_job

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


@pytest.fixture(scope="module")
def p2p_db(tmp_path_factory):
    """The hand-made send/recv pair of tests/test_crossrank_parallel.py, analysed: run `buffered`
    (the send returns before its receiver arrives) and `rendezvous` (it waits for it)."""
    root = tmp_path_factory.mktemp("p2p")
    con = analysed_db(root / "p2p.duckdb", {name: [p2p_job(root / name, name == "buffered")]
                                            for name in ("buffered", "rendezvous")})
    yield con
    con.close()


def pytest_configure(config):
    # fail the whole run early and loudly when the variable points nowhere
    _shared_traces_dir()


# ---- the tiers (markers registered in pyproject.toml; README.md gives the commands) ----------
#   fast:  python -m pytest -m "not slow and not shared and not ci_only"
#   all:   CTDA_TRACES=../shared/traces python -m pytest  (what CI runs)

# tests that need what .ci/run installs or builds (Chromium, SimGrid, a wheel): with CI set a
# missing tool fails them, elsewhere it skips them
CI_ONLY_FIXTURES = {"wheel", "simgrid"}
CI_ONLY_CALLS = ("chromium_or_skip(", "needs_simgrid(")

# measured: the tests and modules that take the default tier past 3 minutes on the shared
# 2-core machine (`--durations`); a module listed by file name, a test by its name
SLOW_MODULES: set[str] = set()
SLOW_TESTS: set[str] = set()


def _calls_a_ci_tool(item) -> bool:
    try:
        source = inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return False
    return any(call in source for call in CI_ONLY_CALLS)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "shared_traces" in item.fixturenames:
            item.add_marker(pytest.mark.shared)
        if CI_ONLY_FIXTURES & set(item.fixturenames) or _calls_a_ci_tool(item):
            item.add_marker(pytest.mark.ci_only)
        name = getattr(item, "originalname", item.name)
        if item.path.name in SLOW_MODULES or name in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
