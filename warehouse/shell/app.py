"""The interactive shell: a prompt_toolkit loop over SQL statements and dot commands."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import time
from pathlib import Path

import duckdb
from prompt_toolkit import PromptSession
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import FileHistory
from prompt_toolkit.lexers import PygmentsLexer
from pygments.lexers.sql import PostgresLexer

from ctda_sql.cli.output import default_format, render, table_width, write_cursor
from ctda_sql.core.config import Config, load_config
from ctda_sql.core.connection import open_session, resolve_db_path
from ctda_sql.core.errors import CtdaError
from ctda_sql.core.terminal import is_tty
from ctda_sql.shell.catalog import Catalog
from ctda_sql.shell.commands import command_attaches, command_writes, is_dot_command, run_dot_command
from ctda_sql.shell.completion import WarehouseCompleter
from ctda_sql.shell.runner import QueryCancelled, StatementFailed, error_lines, interruptible, run_sql, split_statements
from ctda_sql.shell.state import Result, Script, ShellState

HISTORY_ENV = "CTDA_HISTORY"
PROMPT = "ctda> "
CONTINUATION = "  ... "
WELCOME = "ctda-sql shell on {db}{mode}. End SQL with ';'. .help for commands, Ctrl-D to leave."


def run_shell(args, commands: list[str] | None = None, mode: str | None = None) -> int:
    """Open the database named by args.db (read-only with args.read_only) and run the loop;
    statements piped in on stdin run as a batch that stops at the first error (exit 1).
    As with the DuckDB CLI, `commands` (each -c SQL) run as a batch instead, and `mode`
    (-csv, -json ...) is the first .mode."""
    if getattr(args, "lake", None):
        if args.db:
            raise CtdaError("give --db or --lake, not both")
        state = open_lake_state(args.lake, safe=getattr(args, "safe", False))
    else:
        state = open_state(args.db, args.read_only, safe=getattr(args, "safe", False))
    try:
        if commands is not None:
            return run_batch(state, commands, mode)
        if not is_tty(sys.stdin):
            return run_batch(state, [sys.stdin.read()], mode)
        state.mode = mode or state.mode
        kind = " (lake, read-only)" if state.lake else " (read-only)" if state.read_only else ""
        print(WELCOME.format(db=state.db_path, mode=kind))
        return loop(state, build_session(state))
    finally:
        state.set_output(None)
        state.con.close()


def run_batch(state: ShellState, inputs: list[str], mode: str | None = None) -> int:
    """Run piped-in input (or each -c) as `duckdb` and `sqlite3` do: results in `mode`, else
    csv unless they go to a terminal, no status lines, stop at the first failing statement
    (those before it have run) with exit status 1; a reader that leaves (`| head`) ends it
    quietly with 0."""
    state.interactive = False
    state.mode = mode or load_config().format or default_format(sys.stdout)
    try:
        return 0 if all(run_and_show(state, text) for text in inputs) else 1
    except BrokenPipeError:
        _quiet_stdout()
        return 0


def _quiet_stdout() -> None:
    """Whoever read stdout (`| head`) has gone: what is still buffered for it, and Python's
    flush at exit, go nowhere instead of printing 'Broken pipe'."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def open_state(db: str | None, read_only: bool = False, safe: bool = False) -> ShellState:
    """A session on the database: in memory, with the file attached only while input runs;
    `safe` sessions reach no other file from SQL."""
    path = resolve_db_path(db)
    con = open_session(path, read_only=read_only, safe=safe)
    state = ShellState(con=con, db_path=path, read_only=read_only, safe=safe)
    _apply_settings(state, load_config())
    if not read_only:
        from ctda_sql.ingest.experiments import refresh_run_meta

        with state.holding(write=True):
            refresh_run_meta(state.con)  # runs ingested by other tools get their --meta columns too
    return state


def open_lake_state(lake_dir: str, safe: bool = False) -> ShellState:
    """A read-only session over a Parquet lake: every table is a view over its files."""
    from ctda_sql.lake.views import open_lake

    state = ShellState(con=open_lake(lake_dir, safe=safe), db_path=Path(lake_dir), read_only=True, lake=True,
                       safe=safe)
    _apply_settings(state, load_config())
    return state


def _apply_settings(state: ShellState, config: Config) -> None:
    """The settings file's defaults for a new session (dot commands change them later)."""
    state.mode = config.format or state.mode
    state.max_width = config.max_width
    state.max_rows = config.max_rows if config.max_rows is not None else state.max_rows
    state.timer = config.timer


def history_path() -> Path:
    configured = load_config().history_file
    default = Path(configured).expanduser() if configured else Path.home() / ".ctda_sql_history"
    return Path(os.environ.get(HISTORY_ENV) or default)


def session_history():
    """The history file, or, when it cannot be one (a folder, a folder that does not exist,
    no write permission), history for this session only, said once: prompt_toolkit would print
    a traceback at every prompt."""
    from prompt_toolkit.history import InMemoryHistory

    path = history_path()
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "is a folder", str(path))
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        print(f"warning: history file {path}: {exc.strerror or exc}; history is kept for this session only",
              file=sys.stderr)
        return InMemoryHistory()
    return FileHistory(str(path))


def build_session(state: ShellState, **io) -> PromptSession:
    """The prompt: highlighting, history, suggestions, completion; `io` sets input/output in tests."""
    catalog = Catalog(state.con, state.holding)
    state.on_schema_change.append(catalog.forget)
    session = PromptSession(
        lexer=PygmentsLexer(PostgresLexer),
        completer=WarehouseCompleter(catalog),
        history=session_history(),
        auto_suggest=AutoSuggestFromHistory(),
        # the typed input, not the focused buffer: during Ctrl-R that is the search text
        multiline=Condition(lambda: not input_complete(session.default_buffer.text)),
        prompt_continuation=CONTINUATION,
        complete_while_typing=False,
        vi_mode=load_config().key_bindings == "vi",
        key_bindings=_search_bindings(lambda: session),
        **io,
    )
    return session


def _search_bindings(get_session):
    """Enter during a history search (Ctrl-R) takes the statement found and runs it, as the
    DuckDB CLI and readline do; prompt_toolkit only put it in the buffer. A found input that
    is not complete (SQL without its ';') stays in the buffer to finish."""
    from prompt_toolkit.filters import is_searching
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.search import accept_search

    bindings = KeyBindings()

    @bindings.add("enter", filter=is_searching)
    def _accept_and_run(event) -> None:
        accept_search()
        buffer = get_session().default_buffer
        if input_complete(buffer.text):
            buffer.validate_and_handle()

    return bindings


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
    """Run one input, printing each result as it comes, or the error that stopped it; True
    when every part worked."""
    from ctda_sql.core.transaction import forget_commits, interrupted_message

    forget_commits()  # a Ctrl-C below says whether this input's work was saved, not an earlier one's
    started = time.perf_counter()
    try:
        execute(state, text)
    except KeyboardInterrupt as exc:  # Ctrl-C in a dot command (.ingest): cancel it, keep the session
        print(f"error: {interrupted_message(exc)}", file=sys.stderr)
        return False
    except BrokenPipeError:
        if not state.interactive and state.output_file is None:
            raise  # a batch piped into `head`: run_batch stops quietly
        print("error: the output was closed (broken pipe)", file=sys.stderr)
        return False
    except (CtdaError, duckdb.Error, QueryCancelled, StatementFailed, OSError) as exc:
        print("error: " + _where(state, exc) + "\n".join(error_lines(exc)), file=sys.stderr)
        return False
    except Exception as exc:  # a bug below the shell must not end the session
        print(f"error: {type(exc).__name__}: {error_lines(exc)[0]}", file=sys.stderr)
        return False
    if state.timer:
        print(f"time: {time.perf_counter() - started:.3f} s", file=sys.stderr)
    return True


def _where(state: ShellState, exc: BaseException) -> str:
    """A batch names the line of the statement that failed, as the DuckDB CLI does."""
    return f"near line {exc.line}: " if isinstance(exc, StatementFailed) and not state.interactive else ""


def execute(state: ShellState, text: str) -> None:
    """Run every chunk of `text` in order, dot-command lines and the SQL between them, showing
    each result before the next chunk runs (so `.mode` and `.output` apply from there on)."""
    for line, chunk in input_chunks(text):
        if state.quit_requested:
            return
        attaches_itself = is_dot_command(chunk) and command_attaches(chunk)
        with contextlib.nullcontext() if attaches_itself else state.holding(write=_writes(chunk)):
            if not is_dot_command(chunk):
                run_sql(state, chunk, lambda cursor: show_cursor(state, cursor), first_line=line)
                continue
            results = run_dot_command(state, chunk)
            for result in results:
                if isinstance(result, Script):
                    continue
                if result.cursor is not None:
                    interruptible(state.con, lambda: show_cursor(state, result.cursor))
                else:
                    show(state, result)
        for script in (r for r in results if isinstance(r, Script)):
            execute(state, script.text)  # outside the hold: each of its chunks holds the file itself


# statements that leave the database as it was; any other one attaches it read-write
_READING = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN, duckdb.StatementType.SET,
            duckdb.StatementType.VARIABLE_SET, duckdb.StatementType.PRAGMA}


def _writes(chunk: str) -> bool:
    if is_dot_command(chunk):
        return command_writes(chunk)
    for _, piece in split_statements(chunk):
        try:
            if any(st.type not in _READING for st in duckdb.extract_statements(piece)):
                return True
        except duckdb.Error:
            return False  # another dialect, or a syntax error: what runs before it only reads
    return False


def split_input(text: str) -> list[str]:
    """Dot-command lines on their own, the SQL lines between them joined."""
    return [chunk for _, chunk in input_chunks(text)]


def input_chunks(text: str) -> list[tuple[int, str]]:
    """split_input's chunks, each with the line of `text` it starts on (errors name it)."""
    chunks, sql_lines, sql_start = [], [], 1
    for number, line in enumerate(text.splitlines(), 1):
        pending = "\n".join(sql_lines)
        if is_dot_command(line) and input_complete(pending):
            chunks += [(sql_start, pending), (number, line.strip())] if pending.strip() else [(number, line.strip())]
            sql_lines, sql_start = [], number + 1
        else:
            sql_lines.append(line)
    if "\n".join(sql_lines).strip():
        chunks.append((sql_start, "\n".join(sql_lines)))
    return chunks


def show(state: ShellState, result: Result) -> None:
    if result.columns:
        try:
            write(state, render(result.columns, result.rows, state.mode, _width(state), style=state.style()))
        finally:
            state.result_shown()
    elif result.message and state.interactive:
        print(result.message, flush=True)  # status lines stay on screen, out of .output files


def show_cursor(state: ShellState, cursor) -> None:
    """Print an executed statement's rows: a table through `write` (it may page), any other
    mode streamed batch by batch."""
    try:
        _show_cursor(state, cursor)
    finally:
        state.result_shown()


def _show_cursor(state: ShellState, cursor) -> None:
    if not cursor.description:
        if state.interactive:
            print("OK", flush=True)
        return
    if [d[0] for d in cursor.description] == EXPLAIN_COLUMNS:
        write(state, "\n".join(row[1] for row in cursor.fetchall()))  # the plan as DuckDB draws it
        return
    if state.mode != "table":
        write_cursor(cursor, state.mode, state.out(), style=state.style())
        return
    buffer = io.StringIO()
    write_cursor(cursor, "table", buffer, _width(state), state.max_rows)
    write(state, buffer.getvalue().rstrip("\n"))


EXPLAIN_COLUMNS = ["explain_key", "explain_value"]


def _width(state: ShellState) -> int | None:
    return table_width(state.out(), state.max_width)


def write(state: ShellState, text: str) -> None:
    """Print `text`, through a pager when it is taller than the terminal the user sees."""
    if not text:
        return
    out = state.out()
    if out is sys.stdout and is_tty(out) and text.count("\n") + 2 > shutil.get_terminal_size().lines:
        page(text)
        return
    print(text, file=out, flush=True)


def page(text: str) -> None:
    """Show `text` through the pager: the settings' `pager`, else $MANPAGER or $PAGER, else
    pydoc's choice (less, more, or none). A pager that cannot be run (not found, not
    executable) gets one warning line and the text is printed as it is: pydoc would feed it to
    the shell's `not found` and lose the result."""
    import pydoc

    command = load_config().pager or os.environ.get("MANPAGER") or os.environ.get("PAGER")
    if not command:
        pydoc.pager(text)
        return
    problem = _unrunnable(command) or _pipe_to(command, text)
    if problem:
        print(f"warning: pager {command!r} {problem}; the result follows", file=sys.stderr, flush=True)
        print(text, flush=True)


def _unrunnable(command: str) -> str | None:
    import shlex

    try:
        words = shlex.split(command)
    except ValueError as exc:
        return f"cannot be read ({exc})"
    if not words:
        return "is empty"
    import re

    program = next((w for w in words if not re.match(r"[A-Za-z_]\w*=", w)), None)  # after any VAR=value
    return None if program is None or shutil.which(program) else "was not found"


def _pipe_to(command: str, text: str) -> str | None:
    """Feed `text` to the pager as pydoc does (through the shell, Ctrl-C left to the pager);
    what went wrong when the shell could not run it (status 126 or 127), else None."""
    import subprocess

    proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                            errors="backslashreplace")
    try:
        with proc.stdin as pipe:
            pipe.write(text)
    except (OSError, KeyboardInterrupt):
        pass  # the pager was quit before reading it all
    while True:
        try:
            errors = proc.stderr.read()
            proc.wait()
            break
        except KeyboardInterrupt:
            continue
    if proc.returncode in (126, 127):
        return f"could not be run ({errors.strip().splitlines()[-1] if errors.strip() else proc.returncode})"
    if errors:
        sys.stderr.write(errors)
    return None

