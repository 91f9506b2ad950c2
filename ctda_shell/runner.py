"""Run SQL typed into the shell: dialect transpiling, statement splitting, Ctrl-C, errors."""

from __future__ import annotations

import threading

import duckdb

from warehouse.errors import CtdaError

from .state import Result, ShellState

READ_ONLY_MESSAGE = "the database is open read-only"


class QueryCancelled(Exception):
    """Ctrl-C while a query ran; the query was interrupted, the session goes on."""


def run_sql(state: ShellState, text: str) -> list[Result]:
    """Every statement of `text` (in the session's dialect), one Result each."""
    from warehouse.dialect import to_duckdb, warehouse_column_types  # sqlglot: only when SQL runs

    column_types = warehouse_column_types(state.con) if state.dialect != "duckdb" else None
    sql = to_duckdb(text, state.dialect, column_types)
    results = []
    for statement in duckdb.extract_statements(sql):
        results.append(run_statement(state, statement.query, statement.type))
    return results


def run_statement(state: ShellState, sql: str, kind=None) -> Result:
    result = interruptible(state.con, lambda: fetch(state.con.execute(sql), state.max_rows))
    if kind is not None and kind != duckdb.StatementType.SELECT:
        state.schema_changed()
    return result


def fetch(cursor, max_rows: int) -> Result:
    """Columns and up to `max_rows` rows of an executed cursor."""
    if not cursor.description:
        return Result(message="OK")
    columns = [d[0] for d in cursor.description]
    rows = cursor.fetchmany(max_rows + 1)
    return Result(columns, rows[:max_rows], truncated=len(rows) > max_rows)


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
    text = str(exc).strip()
    if "read-only" in text:
        return [READ_ONLY_MESSAGE]
    lines = text.splitlines() or [type(exc).__name__]
    return [lines[0]] + _position_lines(lines)


def _position_lines(lines: list[str]) -> list[str]:
    for index, line in enumerate(lines):
        if line.startswith("LINE ") and index + 1 < len(lines):
            return [line, lines[index + 1]]
    return []
