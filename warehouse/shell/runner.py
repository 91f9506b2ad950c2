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


class StatementFailed(Exception):
    """A statement's DuckDB error, with the input line the statement starts on: a batch names
    it, and DuckDB's 'LINE n' is counted from the start of the input."""

    def __init__(self, error: duckdb.Error, line: int):
        super().__init__(str(error))
        self.error, self.line = error, line


def run_sql(state: ShellState, text: str, show: Callable[[duckdb.DuckDBPyConnection], None],
            first_line: int = 1) -> None:
    """Run every statement of `text` (in the session's dialect) in turn, `show`ing each one's
    cursor while it can still be interrupted. The first failing statement raises
    StatementFailed; those before it have run, as in the DuckDB CLI, even when the failing
    one is a syntax error. `first_line` is the line `text` starts on in the whole input."""
    from ctda_sql.core.dialect import to_duckdb, warehouse_column_types  # sqlglot: only when SQL runs

    column_types = warehouse_column_types(state.con) if state.dialect != "duckdb" else None
    sql = to_duckdb(text, state.dialect, column_types)
    for line, piece in split_statements(sql, first_line):
        try:
            statements = duckdb.extract_statements(piece)
        except duckdb.Error as exc:
            raise StatementFailed(exc, line) from None
        for statement in statements:
            try:
                interruptible(state.con, lambda: show(state.con.execute(statement.query)))
            except duckdb.Error as exc:
                raise StatementFailed(exc, line) from None
            if statement.type != duckdb.StatementType.SELECT:
                state.schema_changed()


def split_statements(sql: str, first_line: int = 1) -> list[tuple[int, str]]:
    """`sql` cut after each ';' that DuckDB's own tokenizer reads as one (not in a string or a
    comment), as (line it starts on, text from its first token): a syntax error in one
    statement then stops only that one. Its tokenizer counts in UTF-8 bytes."""
    data = sql.encode()
    tokens = duckdb.tokenize(sql)
    ends = [start + offset + 1
            for (start, kind), (following, _) in zip(tokens, [*tokens[1:], (len(data), None)])
            if kind == duckdb.token_type.operator
            for offset, byte in enumerate(data[start:following]) if byte == ord(";")]
    pieces, line, position, index = [], first_line, 0, 0
    for end in [*ends, len(data)]:
        while index < len(tokens) and tokens[index][0] < end and tokens[index][1] == duckdb.token_type.comment:
            index += 1  # a piece starts at its first token that is not a comment
        if index < len(tokens) and tokens[index][0] < end:
            start = tokens[index][0]
            line += data.count(b"\n", position, start)
            position = start
            pieces.append((line, data[start:end].decode()))
        while index < len(tokens) and tokens[index][0] < end:
            index += 1
    return pieces


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
    if isinstance(exc, StatementFailed):
        first, *position = error_lines(exc.error)
        return [first, *_moved_down(position, exc.line - 1)]
    if isinstance(exc, (CtdaError, QueryCancelled)):
        return [str(exc)]
    if "read-only" in str(exc):
        return [READ_ONLY_MESSAGE]
    return [first_line(exc)] + position_lines(exc)


def _moved_down(position: list[str], lines: int) -> list[str]:
    """DuckDB's 'LINE n: ...' and caret lines of a statement counted from the input's start."""
    if not position or not lines or not position[0].startswith("LINE "):
        return position
    number, _, rest = position[0].removeprefix("LINE ").partition(":")
    if not number.isdigit():
        return position
    renumbered = f"LINE {int(number) + lines}:{rest}"
    return [renumbered, " " * (len(renumbered) - len(position[0])) + position[1]]
