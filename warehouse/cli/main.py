"""The `ctda-sql` command line: ingest, analyze, report, query, meta, demo (and the shell,
which ctda_sql.shell plugs in, so this layer never imports it)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path

import duckdb

from ctda_sql import __version__
from ctda_sql.api import Warehouse
from ctda_sql.cli.lake import add_lake_option, check_no_distribution_without_lake
from ctda_sql.cli.options import ANALYZE_OPTIONS, INGEST_OPTIONS, add_options
from ctda_sql.cli.output import (
    DEFAULT_TABLE_ROWS,
    FORMATS,
    add_max_width,
    count,
    default_format,
    table_width,
    write_cursor,
)
from ctda_sql.cli.whatif import add_parser as _add_whatif
from ctda_sql.core.connection import existing_db_path, resolve_db_path, sql_of_folders
from ctda_sql.core.errors import CtdaError, first_line
from ctda_sql.core.signals import stop_watching_sigint, watch_sigint
from ctda_sql.core.transaction import forget_commits, interrupted_message, is_interruption, work_saved

EPILOG = (
    "The database is --db FILE, else $CTDA_DB, else ./ctda.duckdb. "
    "Run `ctda-sql COMMAND --help` for a command's options."
)


def parse_key_values(pairs: list[str] | None, what: str) -> dict[str, str]:
    """KEY=VALUE strings as a dict; a pair without '=' is a CtdaError."""
    result = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CtdaError(f"{what} {pair!r} must look like KEY=VALUE")
        result[key.strip()] = value
    return result


def meta_value(text: str):
    """--meta values: numbers and booleans typed, the rest kept as text."""
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (int, float, bool)) else text


# ---- commands ---------------------------------------------------------------------------

def cmd_ingest(args) -> int:
    from ctda_sql.cli.options import ingest_analysis

    analysis = ingest_analysis(args)  # a bad option fails before anything is loaded
    meta = {k: meta_value(v) for k, v in parse_key_values(args.meta, "--meta").items()}
    check_no_distribution_without_lake(args)
    if args.lake is not None:
        warehouse, cleanup = _lake(args), nullcontext()  # a lake publishes whole partitions only
    else:  # ingest calls no Python UDF and only the macros of its own SQL
        db_path = resolve_db_path(args.db)
        folders = ("ingest", "views") + (("analysis", "crossrank") if analysis is not None else ())
        warehouse = Warehouse(db_path, udfs_for="", macros_for=sql_of_folders(*folders))
        # a failure after the load's COMMIT (in --analyze) keeps the new database: work_saved()
        cleanup = _new_database_removed_on_failure(db_path)
    with cleanup, warehouse as wh:
        result = wh.ingest(args.paths, run=args.run, meta=meta, replace=args.replace,
                           show_progress=not args.quiet)
        _print_loaded(result, args.verbose)
        if analysis is not None:
            # one process for the whole job: no second interpreter start and open (~0.5 s)
            print(analyze_loaded(wh, result, analysis, show_progress=not args.quiet))
    return 0


def _print_loaded(result, verbose: bool) -> None:
    for line in result.loaded:
        print(f"ingested {line}")
    for line in result.skipped + result.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for line in result.notes if verbose else []:
        print(f"note: {line}", file=sys.stderr)
    print(f"run {result.run_name!r}: {len(result.loaded)} loaded, {len(result.skipped)} skipped", flush=True)


def analyze_loaded(wh: Warehouse, result, analysis: dict, show_progress: bool = False) -> str:
    """`ingest --analyze` after the load (CLI and shell): analyze's summary of the run, or why
    it was not analysed."""
    if not result.loaded:
        return f"nothing new was loaded: run {result.run_name!r} not analysed (`ctda-sql analyze` does it)"
    return wh.analyze(run=result.run_name, show_progress=show_progress, **analysis)


@contextmanager
def _new_database_removed_on_failure(db_path: Path):
    """A first ingest that fails leaves no database file behind: the folder stays as it was."""
    existed = db_path.exists()
    try:
        yield
    except BaseException:
        if not existed and not work_saved():  # a Ctrl-C just after COMMIT keeps the work
            for leftover in (db_path, db_path.with_name(db_path.name + ".wal")):
                leftover.unlink(missing_ok=True)
        raise


def cmd_analyze(args) -> int:
    from ctda_sql.cli.options import analysis_settings

    settings = analysis_settings(args)  # a bad option fails before the database opens
    check_no_distribution_without_lake(args)
    if args.lake is not None:
        warehouse = _lake(args)
    else:  # the engine calls no Python UDF and only the macros of its own SQL
        warehouse = Warehouse(existing_db_path(args.db), udfs_for="",
                              macros_for=sql_of_folders("analysis", "crossrank"))
    with warehouse as wh:
        print(wh.analyze(run=args.run, method=args.method, window=args.window,
                         wait_gap_us=settings.wait_gap_us, split_starved=settings.split_starved,
                         show_progress=not args.quiet))
    return 0


def cmd_query(args) -> int:
    sql = sys.stdin.read() if args.sql == "-" else args.sql
    if not sql.strip():
        raise CtdaError("no SQL given")
    if args.dialect and args.dialect.lower() != "duckdb":  # sqlglot takes ~0.15 s to import
        from ctda_sql.core.dialect import transpile_query

        sql = transpile_query(sql, args.dialect, resolve_db_path(args.db))
    if args.explain_sql:
        print(sql)
        return 0
    with _reader(args, sql, macros_for=sql) as wh:
        return _print_result(wh.con.execute(sql), args)  # a cursor streams rows as they come


def cmd_report(args) -> int:
    from ctda_sql.engine.reports import find_report, report_sql_run, run_report

    folders = [Path(f) for f in args.reports or []]
    if args.list or not args.name:
        with Warehouse(":memory:", udfs_for="", macros_for="") as wh:  # listing needs no database
            return _print_result(wh.reports(folders), args)
    report = find_report(args.name, folders)  # unknown names fail before the database opens
    given = parse_key_values(args.param, "--param")
    with _reader(args, report.sql, macros_for=report_sql_run(report)) as wh:
        return _print_result(run_report(wh.con, report, given), args)


def _lake(args) -> Warehouse:
    """The lake of `--lake`, its ingest and analyze run on the Dask cluster the options name."""
    return Warehouse(lake=args.lake, workers=args.workers, scheduler=args.scheduler)


def _reader(args, sql: str, macros_for: str) -> Warehouse:
    """What query and report read: the lake's views or the database opened read-only, with
    only the UDFs and macros `sql` names."""
    if args.lake is not None:
        return Warehouse(lake=args.lake, read_only=True, udfs_for=sql, safe=args.safe, macros_for=macros_for)
    return Warehouse(resolve_db_path(args.db), read_only=True, udfs_for=sql, safe=args.safe,
                     macros_for=macros_for)


def cmd_meta(args) -> int:
    with Warehouse(resolve_db_path(args.db)) as wh:
        count = wh.load_experiments(args.file, args.key)
    print(f"loaded {count} experiment rows from {args.file} (key: {args.key})")
    return 0


def cmd_demo(args) -> int:
    from ctda_sql.cli.demo import run_demo

    run_demo(args.db, out_dir=args.out, trace=args.trace)
    return 0


def _print_result(cursor, args) -> int:
    """Print an executed cursor or a relation (None for statements that return nothing)."""
    from ctda_sql.core.config import load_config

    if cursor is None:
        return 0
    if isinstance(cursor, duckdb.DuckDBPyRelation):  # a small listing: relations cannot stream
        cursor = _FetchedRows(cursor.columns, cursor.types, cursor.fetchall())
    config = load_config()  # options given on the command line win over the settings file
    fmt = args.format or config.format or default_format(sys.stdout)
    width = table_width(sys.stdout, args.max_width if args.max_width is not None else config.max_width)
    write_cursor(cursor, fmt, sys.stdout, width, args.max_rows or config.max_rows or DEFAULT_TABLE_ROWS)
    return 0


class _FetchedRows:
    """Rows already fetched, read the way write_cursor reads a cursor."""

    def __init__(self, columns: list[str], types: list, rows: list[tuple]):
        self.description = [(name, str(type_)) for name, type_ in zip(columns, types)]
        self._rows = iter(rows)

    def fetchmany(self, size: int) -> list[tuple]:
        return [row for _, row in zip(range(size), self._rows)]


# ---- parser -----------------------------------------------------------------------------

def _add_format(parser) -> None:
    parser.add_argument("--format", "-f", choices=FORMATS,
                        help="output format (default: table on a terminal, csv into a pipe or file)")
    add_max_width(parser)
    parser.add_argument("--max-rows", type=count, metavar="N",
                        help=f"rows a table shows; the other formats print every row (default: {DEFAULT_TABLE_ROWS})")


def build_parser(shell_help: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctda-sql",
        description="A SQL warehouse for PyTorch profiler traces, with CTDA-CPA critical paths. "
                    "With no command, opens the interactive shell.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"ctda-sql {__version__}")
    parser.add_argument("--db", help="database file (default: $CTDA_DB or ./ctda.duckdb)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from ctda_sql.cli.advice import add_parsers as add_advice
    from ctda_sql.cli.export import add_export

    for add in (_add_ingest, _add_analyze, _add_whatif, add_advice, _add_report, _add_query, _add_meta, add_export,
                _add_demo, _add_shell):
        add(sub)
    if shell_help:  # the dot commands, described by the layer that defines them
        sub.choices["shell"].epilog = shell_help
        sub.choices["shell"].formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def _safe_option(parser) -> None:
    parser.add_argument("--safe", action="store_true",
                        help="SQL may read or write no file but the warehouse (no COPY, EXPORT, "
                             "read_csv, ATTACH ...): for warehouses shared with others")


def _db_option(parser) -> None:
    # accepted after the command too: `ctda-sql query --db x.duckdb ...`
    parser.add_argument("--db", default=argparse.SUPPRESS, help="database file")


def _add_ingest(sub) -> None:
    p = sub.add_parser("ingest", help="load trace files or folders of rank files as one run",
                       description="Load Kineto trace files (.json, .json.gz) or folders of rank "
                                   "files into the warehouse as one run. All or nothing: a bad file "
                                   "leaves the database unchanged.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace file or folder of rank files")
    add_options(p, INGEST_OPTIONS)  # shared with the shell's .ingest
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="also note the odd fields every Kineto trace has (string pid/tid lanes, flow "
                        "ends without a start)")
    _db_option(p)
    add_lake_option(p, distributed=True)
    p.set_defaults(handler=cmd_ingest)


def _add_analyze(sub) -> None:
    p = sub.add_parser("analyze", help="build dependency graphs and critical paths",
                       description="Materialize nodes, edges and critical_path for every step of "
                                   "every rank (of one run with --run). Re-running replaces earlier "
                                   "results for the same run and method.")
    add_options(p, ANALYZE_OPTIONS)  # shared with the shell's .analyze
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    _db_option(p)
    add_lake_option(p, distributed=True)
    p.set_defaults(handler=cmd_analyze)


def _add_report(sub) -> None:
    p = sub.add_parser("report", help="run a saved report from queries/",
                       description="Run a saved SQL report. Parameters are bound, never pasted "
                                   "into SQL. `ctda-sql report --list` shows them all.")
    p.add_argument("name", nargs="?", help="report name")
    p.add_argument("--param", "-p", action="append", metavar="KEY=VALUE", help="report parameter (repeatable)")
    p.add_argument("--list", action="store_true", help="list the reports and their parameters")
    p.add_argument("--reports", action="append", metavar="DIR",
                   help="folder of your own reports; they shadow bundled ones (repeatable)")
    _add_format(p)
    _safe_option(p)
    _db_option(p)
    add_lake_option(p)
    p.set_defaults(handler=cmd_report)


def _add_query(sub) -> None:
    p = sub.add_parser("query", help="run one SQL statement and print the result",
                       description="Run one SQL statement on the warehouse (read-only). "
                                   "SQL '-' reads the statement from stdin.")
    p.add_argument("sql", metavar="SQL", help="the statement, or - for stdin")
    p.add_argument("--dialect", default="duckdb",
                   help="dialect the SQL is written in (postgres, mysql, ...); transpiled to DuckDB")
    p.add_argument("--explain-sql", action="store_true", help="print the DuckDB SQL instead of running it")
    _add_format(p)
    _safe_option(p)
    _db_option(p)
    add_lake_option(p)
    p.set_defaults(handler=cmd_query)


def _add_meta(sub) -> None:
    p = sub.add_parser("meta", help="experiment metadata (batch size, model, commit ...)",
                       description="Load experiment metadata keyed by run name into the "
                                   "`experiments` table; re-loading updates rows.")
    meta_sub = p.add_subparsers(dest="meta_command", metavar="ACTION", required=True)
    load = meta_sub.add_parser("load", help="load a csv, json or parquet file of experiments")
    load.add_argument("file", metavar="FILE", help="experiments file (.csv, .json, .parquet)")
    load.add_argument("--key", required=True, metavar="COLUMN", help="column holding the run name")
    _db_option(load)
    load.set_defaults(handler=cmd_meta)


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="ingest and analyse the bundled trace, print hotspots",
                       description="Ingest the bundled NCCL training trace (HTA test data, MIT) into "
                                   "a database (--db, else a temporary one), analyse it, print "
                                   "hotspots and coverage for ctda beside per_thread, and write "
                                   "demo.html and demo-overlay.json.gz.")
    p.add_argument("--out", metavar="DIR", help="folder for demo.html and demo-overlay.json.gz "
                                                "(default: the current folder)")
    p.add_argument("--trace", metavar="FILE", help="run the demo on this trace instead")
    _db_option(p)
    p.set_defaults(handler=cmd_demo)


def _add_shell(sub) -> None:
    p = sub.add_parser("shell", help="the interactive SQL shell (the default)",
                       description="Interactive SQL shell with completion, dot commands and history.")
    p.add_argument("--read-only", action="store_true", help="open the database read-only")
    _safe_option(p)
    _db_option(p)
    add_lake_option(p)  # read-only: the lake's tables are views over its Parquet files
    p.set_defaults(handler=None)


# ---- entry ------------------------------------------------------------------------------

def main(argv: list[str] | None = None, shell: Callable[[argparse.Namespace], int] | None = None) -> int:
    """Run one command; `shell` is the interactive shell, provided by the layer above."""
    forget_commits()
    watch_sigint()
    try:
        parser = build_parser(getattr(shell, "help_text", None))
        args = parser.parse_args(argv)
        handler = getattr(args, "handler", None)
        if handler is None:
            if shell is None:
                raise CtdaError("the interactive shell is not available in this entry point")
            args.read_only = getattr(args, "read_only", False)
            args.safe = getattr(args, "safe", False)
            args.lake = getattr(args, "lake", None)
            stop_watching_sigint()  # the shell handles Ctrl-C itself
            return shell(args)
        return handler(args)
    except (KeyboardInterrupt, CtdaError, duckdb.Error, RuntimeError) as exc:
        if is_interruption(exc):  # Ctrl-C, also when DuckDB or a file check wrapped it
            print(interrupted_message(exc), file=sys.stderr)
            return 130
        if isinstance(exc, RuntimeError):
            raise  # a bug, not the user's input: keep the traceback
        print(f"error: {exc if isinstance(exc, CtdaError) else first_line(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # output piped into `head` and the like: stop quietly
        sys.stderr.close()
        return 0
