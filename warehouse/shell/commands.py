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

from ctda_sql.cli.options import ANALYZE_OPTIONS, INGEST_OPTIONS, analysis_settings, command_parser, ingest_analysis
from ctda_sql.cli.output import FORMATS
from ctda_sql.core import sqlfiles
from ctda_sql.core.errors import CtdaError
from ctda_sql.shell.runner import READ_ONLY_MESSAGE, interruptible
from ctda_sql.shell.state import Result, Script, ShellState

# What a command's arguments complete to: a fixed tuple of words, or one of these sources.
TABLES, REPORTS, PATHS, COMMANDS, ANALYZE = "tables", "reports", "paths", "commands", "analyze"
# .advise and .diff: their options, and run names after --run, --run-a and --run-b
ADVICE = "advice"
DIALECTS = ("duckdb", "postgres", "mysql", "sqlite", "bigquery", "snowflake", "spark", "trino", "tsql")


@dataclass(frozen=True)
class DotCommand:
    name: str
    args: str
    help: str
    handler: Callable[[ShellState, list[str]], Result | list[Result]]
    complete: tuple[str, ...] | str = ()
    # the command changes the database: it runs with the file attached read-write
    writes: bool = False
    # the handler gets the rest of the line as one word, quotes kept (it holds SQL)
    raw: bool = False
    # the command attaches a database file itself (.open): it runs with none attached
    attaches: bool = False
    # what names a file or folder: True when the command's arguments do (.output FILE), or
    # the options that take one (.whatif --cluster FILE); a --safe session refuses it there
    names_path: bool | tuple[str, ...] = False


REGISTRY: dict[str, DotCommand] = {}


def dot_command(name: str, args: str, help: str, complete: tuple[str, ...] | str = (), writes: bool = False,
                raw: bool = False, attaches: bool = False, names_path: bool | tuple[str, ...] = False):
    """Register the decorated function as the dot command `name`."""

    def register(handler):
        REGISTRY[name] = DotCommand(name, args, help, handler, complete, writes, raw, attaches, names_path)
        return handler

    return register


def is_dot_command(text: str) -> bool:
    return text.lstrip().startswith(".")


def command_writes(line: str) -> bool:
    command = _command_of(line)
    return bool(command and command.writes)


def command_attaches(line: str) -> bool:
    command = _command_of(line)
    return bool(command and command.attaches)


def _command_of(line: str) -> DotCommand | None:
    words = line.split()
    return REGISTRY.get(words[0].lower()) if words else None


def run_dot_command(state: ShellState, line: str) -> list[Result]:
    name, _, rest = line.strip().partition(" ")
    command = REGISTRY.get(name.lower())
    if command is None:
        raise CtdaError(f"unknown command {name}; .help lists the commands")
    words = ([rest.strip()] if rest.strip() else []) if command.raw else _split(rest)
    if state.safe and (named := path_named(command, words)):
        raise CtdaError(f"{named} is off in a --safe session: it names a file, and a --safe session "
                        "reaches no file but the warehouse")
    outcome = command.handler(state, words)
    return outcome if isinstance(outcome, list) else [outcome]


def path_named(command: DotCommand, words: list[str]) -> str | None:
    """What in `command words` names a file or folder (".output", ".whatif --cluster"), else None.
    An option counts in any form argparse takes: --cluster FILE, --cluster=FILE, --clus FILE."""
    if command.names_path is True:
        return command.name
    for word in words:
        typed = word.partition("=")[0]
        if len(typed) > 2 and typed.startswith("--"):
            option = next((o for o in command.names_path or () if o.startswith(typed)), None)
            if option:
                return f"{command.name} {option}"
    return None


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line.strip())
    except ValueError as exc:
        raise CtdaError(f"cannot read the command: {exc}") from None


def help_rows() -> list[tuple[str, str, str]]:
    return [(c.name, c.args, c.help) for c in REGISTRY.values()]


# help_text puts a longer command's description on the line below it
HELP_COLUMN = 38


def help_text() -> str:
    """The dot commands as plain text, for `ctda-sql shell --help`."""
    lines = ["dot commands (inside the shell):"]
    for command in REGISTRY.values():
        usage = f"  {command.name} {command.args}".rstrip()
        if len(usage) < HELP_COLUMN:
            lines.append(f"{usage.ljust(HELP_COLUMN)}{command.help}")
        else:
            lines += [usage, " " * HELP_COLUMN + command.help]
    lines += ["", "the DuckDB CLI's flags (before or after `shell`):",
              f"  {'-c SQL'.ljust(HELP_COLUMN - 2)}run SQL or a dot command as a batch and leave (repeatable)",
              f"  {'-csv, -json, -line, -markdown'.ljust(HELP_COLUMN - 2)}the output mode (any .mode: -tsv, -table ...)"]
    return "\n".join(lines)


def markdown_table() -> str:
    """The dot commands as the markdown table of docs/shell.md."""
    def cell(text: str) -> str:
        return f"`{text.replace('|', chr(92) + '|')}`" if text else ""

    lines = ["| command | arguments | does |", "| --- | --- | --- |"]
    lines += [f"| `{c.name}` | {cell(c.args)} | {c.help} |".replace("|  |", "| |") for c in REGISTRY.values()]
    return "\n".join(lines)


# ---- helpers -----------------------------------------------------------------------------

def _expect(words: list[str], most: int, usage: str, least: int = 0) -> None:
    if not least <= len(words) <= most:
        raise CtdaError(f"usage: {usage}")


def _query(state: ShellState, sql: str, params=None) -> Result:
    """The executed query, its rows printed as they are fetched."""
    return Result(cursor=interruptible(state.con, lambda: state.con.execute(sql, params)))


def _fetched(state: ShellState, sql: str, params=None) -> Result:
    """The query's rows, all in memory (for small catalogue answers)."""
    cursor = interruptible(state.con, lambda: state.con.execute(sql, params))
    return Result([d[0] for d in cursor.description], cursor.fetchall())


def _writable(state: ShellState) -> None:
    if state.lake:
        raise CtdaError("a lake is read-only in the shell; load and analyse it with "
                        "`ctda-sql ingest --lake DIR` and `ctda-sql analyze --lake DIR`")
    if state.read_only:
        raise CtdaError(READ_ONLY_MESSAGE)


# ---- commands ----------------------------------------------------------------------------

@dot_command(".help", "[COMMAND | report NAME]", "list the dot commands, or show one, or a report's parameters",
             complete=COMMANDS)
def show_help(state, words):
    if words[:1] == ["report"] or words[:1] == [".report"]:
        _expect(words, 2, ".help report NAME", least=2)
        return _report_help(words[1])
    _expect(words, 1, ".help [COMMAND | report NAME]")
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
    result = _fetched(state, sqlfiles.load("shell/columns.sql"), [words[0]])
    if not result.rows:
        raise CtdaError(f"no table or view named {words[0]!r}; .tables lists them")
    described = _fetched(state, sqlfiles.load("shell/table_comment.sql"), [words[0]]).rows
    return [Result(message=f"{words[0]}: {described[0][0]}")] * bool(described) + [result]


@dot_command(".runs", "", "the ingested runs: ranks, steps, events, metadata")
def runs(state, words):
    _expect(words, 0, ".runs")
    return _run_report(state, "runs", {})


@dot_command(".reports", "", "list the saved reports and their parameters")
def reports(state, words):
    from ctda_sql.engine.reports import all_reports

    _expect(words, 0, ".reports")
    rows = [(r.name, r.description, r.params_text(), r.source) for r in all_reports().values()]
    return Result(["name", "description", "params", "source"], rows)


def _report_help(name: str) -> list[Result]:
    """What a report answers, then each parameter: type, default and help from its header."""
    from ctda_sql.engine.reports import find_report

    found = find_report(name)
    rows = [(p.name, p.type, "NULL" if p.default is None else str(p.default), p.help) for p in found.params]
    usage = f".report {found.name}" + "".join(f" [{p.name}=...]" for p in found.params)
    return [Result(message=f"{found.name}: {found.description}\n{usage}  ({found.source})"),
            Result(["parameter", "type", "default", "help"], rows)]


@dot_command(".report", "NAME [KEY=VALUE]...", "run a saved report with bound parameters", complete=REPORTS)
def report(state, words):
    from ctda_sql.cli.main import parse_key_values

    _expect(words, 99, ".report NAME [KEY=VALUE]...", least=1)
    return _run_report(state, words[0], parse_key_values(words[1:], "parameter"))


def _run_report(state: ShellState, name: str, given: dict[str, str]) -> Result:
    from ctda_sql.engine.reports import find_report, run_report

    found = find_report(name)
    return Result(cursor=interruptible(state.con, lambda: run_report(state.con, found, given)))


_INGEST = command_parser(".ingest", INGEST_OPTIONS, positional="PATH...")
_ANALYZE = command_parser(".analyze", ANALYZE_OPTIONS)


@dot_command(".ingest", _INGEST.usage.removeprefix(".ingest "),
             "load trace files or folders of rank files as one run", complete=PATHS, writes=True, names_path=True)
def ingest(state, words):
    from ctda_sql import Warehouse
    from ctda_sql.cli.main import analyze_loaded, meta_value, parse_key_values

    args = _INGEST.parse_args(words)
    analysis = ingest_analysis(args)
    _writable(state)
    meta = {k: meta_value(v) for k, v in parse_key_values(args.meta, "--meta").items()}
    warehouse = Warehouse.on_connection(state.con)
    outcome = warehouse.ingest(args.paths, run=args.run, meta=meta, replace=args.replace)
    state.schema_changed()
    rows = [(line,) for line in outcome.loaded] + [(f"warning: {w}",) for w in outcome.skipped + outcome.warnings]
    if analysis is not None:
        rows += [(line,) for line in analyze_loaded(warehouse, outcome, analysis).splitlines()]
    return Result([f"run {outcome.run_name}"], rows)


@dot_command(".analyze", _ANALYZE.usage.removeprefix(".analyze "),
             "build dependency graphs and critical paths", complete=ANALYZE, writes=True)
def analyze(state, words):
    from ctda_sql import Warehouse

    args = _ANALYZE.parse_args(words)
    settings = analysis_settings(args)
    _writable(state)
    summary = Warehouse.on_connection(state.con).analyze(
        run=args.run, method=args.method, window=args.window, wait_gap_us=settings.wait_gap_us,
        split_starved=settings.split_starved)
    state.schema_changed()
    return Result(message=str(summary))


@dot_command(".whatif", "[--run NAME] [--scale [CAT:]PATTERN=FACTOR]... [--cluster FILE.toml] ...",
             "predict step time under a change (options as `ctda-sql whatif`)", writes=True,
             names_path=("--cluster",))
def whatif(state, words):
    from ctda_sql.cli.whatif import parse_shell_words, run

    _writable(state)
    tables = run(state.con, parse_shell_words(words))
    state.schema_changed()
    return [Result(columns, rows) for columns, rows in tables]


@dot_command(".advise", "[--run NAME] [--rank N] [--step S] [--top K] [--profile-top N]",
             "what to fix first, and what the replay predicts it buys (as `ctda-sql advise`)",
             complete=ADVICE, writes=True)
def advise(state, words):
    from ctda_sql.cli.advice import shell_advise

    _writable(state)
    tables = shell_advise(state.con, words)
    state.schema_changed()
    return [Result(columns, rows) for columns, rows in tables]


@dot_command(".diff", "--run-a A --run-b B [--rank N]",
             "why run B's step differs from run A's, along the critical paths (as `ctda-sql diff`)",
             complete=ADVICE)
def diff(state, words):
    from ctda_sql.cli.advice import shell_diff

    return [Result(columns, rows) for columns, rows in shell_diff(state.con, words)]


@dot_command(".mode", "|".join(FORMATS), "how results are printed", complete=FORMATS)
def mode(state, words):
    _expect(words, 1, f".mode {'|'.join(FORMATS)}", least=1)
    if words[0] not in FORMATS:
        raise CtdaError(f"unknown mode {words[0]!r}; choose one of {', '.join(FORMATS)}")
    state.mode = words[0]
    state.separator = None  # as in sqlite3 and the DuckDB CLI: each mode has its own separator
    return Result(message=f"mode {state.mode}")


@dot_command(".headers", "on|off", "print the column names in csv, tsv and list", complete=("on", "off"))
def headers(state, words):
    state.headers = _on_off(words, ".headers on|off")
    return Result(message=f"headers {words[0]}")


@dot_command(".nullvalue", "TEXT", "the text NULL prints as in csv, tsv and list (default: empty; list: NULL)")
def nullvalue(state, words):
    _expect(words, 1, ".nullvalue TEXT", least=1)
    state.null_text = words[0]
    return Result(message=f"nullvalue {words[0]!r}")


@dot_command(".separator", "SEP", "what separates values in csv, tsv (one character) and list (any text); "
             "\\t is a tab; .mode sets the format's own again", raw=True)
def separator(state, words):
    _expect(words, 1, ".separator SEP", least=1)
    text = words[0]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":  # quoted: ' | '
        text = text[1:-1]
    if not text:
        raise CtdaError("usage: .separator SEP (at least one character)")
    state.separator = text.replace("\\t", "\t")  # as sqlite3 reads it, quoted or not
    return Result(message=f"separator {state.separator!r}")


@dot_command(".maxrows", "N", "rows a table shows (the rest are counted); other modes print every row")
def maxrows(state, words):
    state.max_rows = _count(words, ".maxrows N", least=1)
    return Result(message=f"maxrows {state.max_rows}")


@dot_command(".maxwidth", "N|auto", "widest table in characters: 0 for no limit, auto to fit the terminal",
             complete=("auto", "0"))
def maxwidth(state, words):
    auto = words == ["auto"]
    state.max_width = None if auto else _count(words, ".maxwidth N|auto", least=0)
    return Result(message=f"maxwidth {'auto' if auto else state.max_width}")


def _count(words: list[str], usage: str, least: int) -> int:
    _expect(words, 1, usage, least=1)
    if not words[0].isdigit() or int(words[0]) < least:
        raise CtdaError(f"usage: {usage} (a whole number of at least {least})")
    return int(words[0])


@dot_command(".timer", "on|off", "show how long each input took", complete=("on", "off"))
def timer(state, words):
    state.timer = _on_off(words, ".timer on|off")
    return Result(message=f"timer {words[0]}")


def _on_off(words: list[str], usage: str) -> bool:
    _expect(words, 1, usage, least=1)
    if words[0] not in ("on", "off"):
        raise CtdaError(f"usage: {usage}")
    return words[0] == "on"


@dot_command(".output", "FILE|stdout", "send results to FILE (overwritten), or back to the screen",
             complete=PATHS, names_path=True)
def output(state, words):
    _expect(words, 1, ".output FILE|stdout", least=1)
    target = None if words[0] == "stdout" else words[0]
    state.set_output(target)
    return Result(message=f"output {target or 'stdout'}")


@dot_command(".once", "FILE", "send the next result to FILE (overwritten), then back to the screen",
             complete=PATHS, names_path=True)
def once(state, words):
    _expect(words, 1, ".once FILE", least=1)
    state.set_output(words[0], once=True)
    return Result(message=f"output {words[0]} for the next result")


@dot_command(".read", "FILE", "run the SQL and dot commands in FILE", complete=PATHS, names_path=True)
def read(state, words):
    _expect(words, 1, ".read FILE", least=1)
    path = Path(words[0])
    if not path.is_file():
        raise CtdaError(f"{path}: no such file")
    return Script(path.read_text(encoding="utf-8"))


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


@dot_command(".explain", "SQL", "run SQL with EXPLAIN ANALYZE and print its plan with times and row counts",
             raw=True)
def explain(state, words):
    _expect(words, 1, ".explain SQL", least=1)
    return _query(state, "EXPLAIN ANALYZE " + words[0].rstrip().rstrip(";"))


# .export: the COPY format of each file name ending
EXPORT_FORMATS = {".csv": "csv", ".tsv": "csv, DELIMITER '\t'", ".parquet": "parquet", ".json": "json"}


@dot_command(".export", "FILE SQL", "write the result of SQL to FILE: .csv, .tsv, .parquet or .json (one object a line)",
             raw=True, names_path=True)
def export(state, words):
    usage = ".export FILE SQL"
    _expect(words, 1, usage, least=1)
    target, _, sql = words[0].partition(" ")
    suffix = Path(target).suffix.lower()
    if suffix not in EXPORT_FORMATS:
        raise CtdaError(f"cannot tell the format of {target!r}; name it {', '.join('*' + s for s in EXPORT_FORMATS)}")
    if not sql.strip():
        raise CtdaError(f"usage: {usage}")
    # the file name is bound; the SQL is the user's own statement, run as typed
    copy = f"COPY ({sql.strip().rstrip(';')}) TO ? (FORMAT {EXPORT_FORMATS[suffix]})"
    interruptible(state.con, lambda: state.con.execute(copy, [str(Path(target).expanduser())]))
    return Result(message=f"exported to {target}")


@dot_command(".open", "FILE [--read-only]", "work on another database file (created unless --read-only)",
             complete=PATHS, attaches=True, names_path=True)
def open_database(state, words):
    from ctda_sql.core.connection import prepare_session

    _expect(words, 2, ".open FILE [--read-only]", least=1)
    read_only = words[1:] == ["--read-only"]
    if len(words) == 2 and not read_only:
        raise CtdaError("usage: .open FILE [--read-only]")
    path = Path(words[0]).expanduser()
    prepare_session(state.con, path, read_only)
    state.db_path, state.read_only, state.lake = path, read_only, False
    state.schema_changed()
    return Result(message=f"opened {path}" + (" (read-only)" if read_only else ""))


@dot_command(".quit", "", "leave the shell (Ctrl-D does too)")
def quit_shell(state, words):
    _expect(words, 0, ".quit")
    state.quit_requested = True
    return []
