"""The interactive shell: a prompt_toolkit loop over SQL statements and dot commands."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import duckdb
from prompt_toolkit import PromptSession
from prompt_toolkit.application.current import get_app
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import FileHistory
from prompt_toolkit.lexers import PygmentsLexer
from pygments.lexers.sql import PostgresLexer

from warehouse.connection import connect, resolve_db_path
from warehouse.errors import CtdaError
from warehouse.output import render

from .catalog import Catalog
from .commands import is_dot_command, run_dot_command
from .completion import WarehouseCompleter
from .runner import QueryCancelled, error_lines, run_sql
from .state import Result, ShellState

HISTORY_ENV = "CTDA_HISTORY"
PROMPT = "ctda> "
CONTINUATION = "  ... "
WELCOME = "ctda-sql shell on {db}{mode}. End SQL with ';'. .help for commands, Ctrl-D to leave."


def run_shell(args) -> int:
    """Open the database named by args.db (read-only with args.read_only) and run the loop."""
    state = open_state(args.db, args.read_only, safe=getattr(args, "safe", False))
    print(WELCOME.format(db=state.db_path, mode=" (read-only)" if state.read_only else ""))
    try:
        return loop(state, build_session(state))
    finally:
        state.set_output(None)
        state.con.close()


def open_state(db: str | None, read_only: bool = False, safe: bool = False) -> ShellState:
    path = resolve_db_path(db)
    con = connect(path, read_only=read_only, safe=safe)
    if not read_only:
        from warehouse.experiments import refresh_run_meta

        refresh_run_meta(con)  # runs ingested by other tools get their --meta columns too
    return ShellState(con=con, db_path=path, read_only=read_only)


def history_path() -> Path:
    return Path(os.environ.get(HISTORY_ENV) or Path.home() / ".ctda_sql_history")


def build_session(state: ShellState, **io) -> PromptSession:
    """The prompt: highlighting, history, suggestions, completion; `io` sets input/output in tests."""
    catalog = Catalog(state.con)
    state.on_schema_change.append(catalog.forget)
    return PromptSession(
        lexer=PygmentsLexer(PostgresLexer),
        completer=WarehouseCompleter(catalog),
        history=FileHistory(str(history_path())),
        auto_suggest=AutoSuggestFromHistory(),
        multiline=Condition(lambda: not input_complete(get_app().current_buffer.text)),
        prompt_continuation=CONTINUATION,
        complete_while_typing=False,
        **io,
    )


def input_complete(text: str) -> bool:
    """Enter runs the input when it is a dot command, empty, or SQL ended by ';'."""
    stripped = text.strip()
    return not stripped or is_dot_command(stripped) or stripped.endswith(";")


def loop(state: ShellState, session: PromptSession) -> int:
    """Read and run inputs until .quit or Ctrl-D; Ctrl-C drops the current input."""
    while not state.quit_requested:
        try:
            text = session.prompt(PROMPT)
        except KeyboardInterrupt:
            continue
        except EOFError:
            break
        run_and_show(state, text)
    return 0


def run_and_show(state: ShellState, text: str) -> bool:
    """Run one input and print its results or its error; True when it worked."""
    started = time.perf_counter()
    try:
        results = execute(state, text)
    except (CtdaError, duckdb.Error, QueryCancelled, OSError) as exc:
        print("error: " + "\n".join(error_lines(exc)), file=sys.stderr)
        return False
    except Exception as exc:  # a bug below the shell must not end the session
        print(f"error: {type(exc).__name__}: {error_lines(exc)[0]}", file=sys.stderr)
        return False
    show(state, results)
    if state.timer:
        print(f"time: {time.perf_counter() - started:.3f} s", file=sys.stderr)
    return True


def execute(state: ShellState, text: str) -> list[Result]:
    """Results of every chunk of `text`: dot-command lines and SQL between them."""
    results: list[Result] = []
    for chunk in split_input(text):
        if state.quit_requested:
            break
        results += run_dot_command(state, chunk) if is_dot_command(chunk) else run_sql(state, chunk)
    return results


def split_input(text: str) -> list[str]:
    """Dot-command lines on their own, the SQL lines between them joined."""
    chunks, sql_lines = [], []
    for line in text.splitlines():
        pending = "\n".join(sql_lines)
        if is_dot_command(line) and input_complete(pending):
            chunks += [pending, line.strip()] if pending.strip() else [line.strip()]
            sql_lines = []
        else:
            sql_lines.append(line)
    if "\n".join(sql_lines).strip():
        chunks.append("\n".join(sql_lines))
    return chunks


def show(state: ShellState, results: list[Result]) -> None:
    # tables fit the terminal the user sees; files and pipes get render's wide default
    width = shutil.get_terminal_size().columns if _is_tty(state.out()) else None
    for result in results:
        if result.columns:
            write(state, format_result(result, state.mode, width))
        elif result.message:
            print(result.message, flush=True)  # status lines stay on screen, out of .output files


def format_result(result: Result, mode: str, width: int | None = None) -> str:
    if not result.columns:
        return result.message or ""
    text = render(result.columns, result.rows, mode, width=width)
    if result.truncated:
        text += f"\n(only the first {len(result.rows)} rows are shown; add a LIMIT or use .output)"
    return text


def write(state: ShellState, text: str) -> None:
    """Print `text`, through a pager when it is taller than the terminal the user sees."""
    if not text:
        return
    out = state.out()
    if out is sys.stdout and _is_tty(out) and text.count("\n") + 2 > shutil.get_terminal_size().lines:
        import pydoc

        pydoc.pager(text)
        return
    print(text, file=out, flush=True)


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
