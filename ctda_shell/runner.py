"""Run SQL typed into the shell: dialect transpiling, statement splitting, Ctrl-C, errors."""

from __future__ import annotations

import threading
from collections.abc import Callable

import duckdb

from ctda_sql.core.errors import CtdaError, first_line, position_lines

from ctda_sql.shell.state import ShellState

READ_ONLY_MESSAGE = "the database is open read-only"


class QueryCancelled(Exception):
    """Ctrl-C while a query ran; the query was interrupted, the session goes on."""


def run_sql(state: ShellState, text: str, show: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
    """Run every statement of `text` (in the session's dialect) in turn, `show`ing each one's
    cursor while it can still be interrupted; the first failing statement raises."""
    from ctda_sql.core.dialect import to_duckdb, warehouse_column_types  # sqlglot: only when SQL runs

    column_types = warehouse_column_types(state.con) if state.dialect != "duckdb" else None
    sql = to_duckdb(text, state.dialect, column_types)
    for statement in duckdb.extract_statements(sql):
        interruptible(state.con, lambda: show(state.con.execute(statement.query)))
        if statement.type != duckdb.StatementType.SELECT:
            state.schema_changed()


def interruptible(con: duckdb.DuckDBPyConnection, work):
    """Run `work()` in a helper thread so Ctrl-C can interrupt the query via con.interrupt()."""
    outcome: dict = {}
    # an Event, not Thread.join: a join cut short by Ctrl-C can report a live thread as ended
    done = threading.Event()

    def target():
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, daemon=True).start()
    try:
        while not done.wait(0.05):
            pass
    except KeyboardInterrupt:
        _cancel(con, done)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _cancel(con: duckdb.DuckDBPyConnection, done: threading.Event):
    con.interrupt()
    while not done.is_set():
        try:
            done.wait()
        except KeyboardInterrupt:
            con.interrupt()  # impatient second Ctrl-C: the query is already stopping
    raise QueryCancelled("query cancelled")


def error_lines(exc: BaseException) -> list[str]:
    """A user-facing error: one line, plus DuckDB's 'LINE n:' and caret lines when present."""
    if isinstance(exc, (CtdaError, QueryCancelled)):
        return [str(exc)]
    if "read-only" in str(exc):
        return [READ_ONLY_MESSAGE]
    return [first_line(exc)] + position_lines(exc)
