"""Dot commands: one registry (name, argument syntax, help, completion) that also writes .help.

    @dot_command(".timer", "on|off", "show how long each input took", complete=("on", "off"))
    def timer(state, words): ...

A handler takes the session state and the words after the command name, and returns a
Result (or a list of them), just as SQL does; problems are CtdaErrors.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from warehouse import sqlfiles
from warehouse.errors import CtdaError
from warehouse.output import FORMATS

from .runner import READ_ONLY_MESSAGE, fetch, interruptible
from .state import Result, ShellState

# What a command's arguments complete to: a fixed tuple of words, or one of these sources.
TABLES, REPORTS, PATHS, COMMANDS, ANALYZE_OPTIONS = "tables", "reports", "paths", "commands", "analyze"
DIALECTS = ("duckdb", "postgres", "mysql", "sqlite", "bigquery", "snowflake", "spark", "trino", "tsql")
ANALYZE_METHODS = ("all", "ctda", "per_thread", "cross_rank")


@dataclass(frozen=True)
class DotCommand:
    name: str
    args: str
    help: str
    handler: Callable[[ShellState, list[str]], Result | list[Result]]
    complete: tuple[str, ...] | str = ()


REGISTRY: dict[str, DotCommand] = {}


def dot_command(name: str, args: str, help: str, complete: tuple[str, ...] | str = ()):
    """Register the decorated function as the dot command `name`."""

    def register(handler):
        REGISTRY[name] = DotCommand(name, args, help, handler, complete)
        return handler

    return register


def is_dot_command(text: str) -> bool:
    return text.lstrip().startswith(".")


def run_dot_command(state: ShellState, line: str) -> list[Result]:
    words = _split(line)
    command = REGISTRY.get(words[0].lower())
    if command is None:
        raise CtdaError(f"unknown command {words[0]}; .help lists the commands")
    outcome = command.handler(state, words[1:])
    return outcome if isinstance(outcome, list) else [outcome]


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line.strip())
    except ValueError as exc:
        raise CtdaError(f"cannot read the command: {exc}") from None


def help_rows() -> list[tuple[str, str, str]]:
    return [(c.name, c.args, c.help) for c in REGISTRY.values()]


def help_text() -> str:
    """The dot commands as plain text, for `ctda-sql shell --help`."""
    width = max(len(f"{c.name} {c.args}") for c in REGISTRY.values())
    lines = ["dot commands (inside the shell):"]
    lines += [f"  {(c.name + ' ' + c.args).ljust(width)}  {c.help}" for c in REGISTRY.values()]
    return "\n".join(lines)


# ---- helpers -----------------------------------------------------------------------------

def _expect(words: list[str], most: int, usage: str, least: int = 0) -> None:
    if not least <= len(words) <= most:
        raise CtdaError(f"usage: {usage}")


def _query(state: ShellState, sql: str, params=None) -> Result:
    return interruptible(state.con, lambda: fetch(state.con.execute(sql, params), state.max_rows))


def _options(words: list[str], names: tuple[str, ...], usage: str) -> tuple[list[str], dict[str, list[str]]]:
    """Positional words and `--name VALUE` options (repeatable) from `words`."""
    positional, options = [], {}
    items = iter(words)
    for word in items:
        if word in names:
            value = next(items, None)
            if value is None:
                raise CtdaError(f"{word} needs a value; usage: {usage}")
            options.setdefault(word, []).append(value)
        elif word.startswith("--"):
            raise CtdaError(f"unknown option {word}; usage: {usage}")
        else:
            positional.append(word)
    return positional, options


def _writable(state: ShellState) -> None:
    if state.read_only:
        raise CtdaError(READ_ONLY_MESSAGE)


# ---- commands ----------------------------------------------------------------------------

@dot_command(".help", "[COMMAND]", "list the dot commands, or show one", complete=COMMANDS)
def show_help(state, words):
    _expect(words, 1, ".help [COMMAND]")
    rows = help_rows()
    if words:
        wanted = words[0] if words[0].startswith(".") else "." + words[0]
        rows = [row for row in rows if row[0] == wanted]
        if not rows:
            raise CtdaError(f"no command {wanted}; .help lists the commands")
    rows.append(("SQL;", "", "any DuckDB statement, ended by ';' (may span lines)"))
    return Result(["command", "arguments", "description"], rows)


@dot_command(".tables", "", "list the tables and views")
def tables(state, words):
    _expect(words, 0, ".tables")
    return _query(state, sqlfiles.load("shell/tables.sql"))


@dot_command(".schema", "[TABLE]", "the columns of TABLE, or every table's CREATE statement", complete=TABLES)
def schema(state, words):
    _expect(words, 1, ".schema [TABLE]")
    if not words:
        return _query(state, sqlfiles.load("shell/schema_all.sql"))
    result = _query(state, sqlfiles.load("shell/columns.sql"), [words[0]])
    if not result.rows:
        raise CtdaError(f"no table or view named {words[0]!r}; .tables lists them")
    return result


@dot_command(".runs", "", "the ingested runs: ranks, steps, events, metadata")
def runs(state, words):
    _expect(words, 0, ".runs")
    return _run_report(state, "runs", {})


@dot_command(".reports", "", "list the saved reports and their parameters")
def reports(state, words):
    from warehouse.reports import all_reports

    _expect(words, 0, ".reports")
    rows = [(r.name, r.description, _param_summary(r), r.source) for r in all_reports().values()]
    return Result(["name", "description", "params", "source"], rows)


def _param_summary(report) -> str:
    return ", ".join(f"{p.name} {p.type} = {p.default!r}" if p.default is not None else f"{p.name} {p.type}"
                     for p in report.params)


@dot_command(".report", "NAME [KEY=VALUE]...", "run a saved report with bound parameters", complete=REPORTS)
def report(state, words):
    from warehouse.cli import parse_key_values

    _expect(words, 99, ".report NAME [KEY=VALUE]...", least=1)
    return _run_report(state, words[0], parse_key_values(words[1:], "parameter"))


def _run_report(state: ShellState, name: str, given: dict[str, str]) -> Result:
    from warehouse.reports import find_report, run_report

    found = find_report(name)
    return interruptible(state.con, lambda: fetch(run_report(state.con, found, given), state.max_rows))


@dot_command(".ingest", "PATH... [--run NAME] [--meta KEY=VALUE]...",
             "load trace files or folders of rank files as one run", complete=PATHS)
def ingest(state, words):
    from warehouse import Warehouse
    from warehouse.cli import meta_value, parse_key_values

    usage = ".ingest PATH... [--run NAME] [--meta KEY=VALUE]..."
    paths, options = _options(words, ("--run", "--meta"), usage)
    _expect(paths, 10_000, usage, least=1)
    _writable(state)
    meta = {k: meta_value(v) for k, v in parse_key_values(options.get("--meta"), "--meta").items()}
    run_name = options.get("--run", [None])[-1]
    outcome = Warehouse.on_connection(state.con).ingest(paths, run=run_name, meta=meta)
    state.schema_changed()
    rows = [(line,) for line in outcome.loaded] + [(f"warning: {w}",) for w in outcome.skipped + outcome.warnings]
    return Result([f"run {outcome.run_name}"], rows)


@dot_command(".analyze", "[--run NAME] [--method all|ctda|per_thread|cross_rank]",
             "build dependency graphs and critical paths", complete=ANALYZE_OPTIONS)
def analyze(state, words):
    usage = ".analyze [--run NAME] [--method all|ctda|per_thread|cross_rank]"
    positional, options = _options(words, ("--run", "--method"), usage)
    _expect(positional, 0, usage)
    method = options.get("--method", ["all"])[-1]
    if method not in ANALYZE_METHODS:
        raise CtdaError(f"unknown method {method!r}; choose one of {', '.join(ANALYZE_METHODS)}")
    _writable(state)
    from warehouse import Warehouse

    summary = Warehouse.on_connection(state.con).analyze(run=options.get("--run", [None])[-1], method=method)
    state.schema_changed()
    return Result(message=str(summary))


@dot_command(".whatif", "[--run NAME] [--scale [CAT:]PATTERN=FACTOR]... [--comm-bandwidth-scale F] ...",
             "predict step time under a change (options as `ctda-sql whatif`)")
def whatif(state, words):
    from warehouse.cli_whatif import parse_shell_words, run

    _writable(state)
    tables = run(state.con, parse_shell_words(words))
    state.schema_changed()
    return [Result(columns, rows) for columns, rows in tables]


@dot_command(".mode", "|".join(FORMATS), "how results are printed", complete=FORMATS)
def mode(state, words):
    _expect(words, 1, f".mode {'|'.join(FORMATS)}", least=1)
    if words[0] not in FORMATS:
        raise CtdaError(f"unknown mode {words[0]!r}; choose one of {', '.join(FORMATS)}")
    state.mode = words[0]
    return Result(message=f"mode {state.mode}")


@dot_command(".timer", "on|off", "show how long each input took", complete=("on", "off"))
def timer(state, words):
    _expect(words, 1, ".timer on|off", least=1)
    if words[0] not in ("on", "off"):
        raise CtdaError("usage: .timer on|off")
    state.timer = words[0] == "on"
    return Result(message=f"timer {words[0]}")


@dot_command(".output", "FILE|stdout", "send results to FILE (overwritten), or back to the screen",
             complete=PATHS)
def output(state, words):
    _expect(words, 1, ".output FILE|stdout", least=1)
    target = None if words[0] == "stdout" else words[0]
    state.set_output(target)
    return Result(message=f"output {target or 'stdout'}")


@dot_command(".read", "FILE", "run the SQL and dot commands in FILE", complete=PATHS)
def read(state, words):
    from .app import execute

    _expect(words, 1, ".read FILE", least=1)
    path = Path(words[0])
    if not path.is_file():
        raise CtdaError(f"{path}: no such file")
    return execute(state, path.read_text(encoding="utf-8"))


@dot_command(".dialect", "|".join(DIALECTS[:3]) + "|...",
             "the SQL dialect typed input is written in; transpiled to DuckDB", complete=DIALECTS)
def dialect(state, words):
    import sqlglot

    _expect(words, 1, ".dialect NAME", least=1)
    try:
        sqlglot.Dialect.get_or_raise(words[0].lower())
    except ValueError:
        raise CtdaError(f"unknown dialect {words[0]!r}; for example {', '.join(DIALECTS)}") from None
    state.dialect = words[0].lower()
    return Result(message=f"dialect {state.dialect}")


@dot_command(".quit", "", "leave the shell (Ctrl-D does too)")
def quit_shell(state, words):
    _expect(words, 0, ".quit")
    state.quit_requested = True
    return []
