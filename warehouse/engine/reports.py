"""Saved SQL reports: one .sql file each, with a header naming its parameters.

    -- name: hotspots
    -- description: one line saying what the report answers
    -- param: run VARCHAR = NULL      run name; all runs when NULL
    -- param: top INTEGER = 20        rows to keep
    -- key: path_us, share_of_path

Parameters are bound as DuckDB named parameters ($run, $top), never pasted into the SQL.
Key columns are the last a table drops to fit a narrow terminal; a report without the line
has none.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ctda_sql.core.errors import CtdaError
from ctda_sql.core.sqlfiles import PARAM_LINE as _PARAM_LINE

REPORTS_ENV = "CTDA_REPORTS"
_TYPES = {"VARCHAR": str, "INTEGER": int, "BIGINT": int, "DOUBLE": float, "BOOLEAN": bool}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass
class Param:
    name: str
    type: str
    default: object
    help: str

    def describe(self) -> str:
        """'top INTEGER = 20: rows to keep', as --list, .help report and completion show it."""
        default = "NULL" if self.default is None else str(self.default).lower() if self.type == "BOOLEAN" \
            else str(self.default)
        return f"{self.name} {self.type} = {default}" + (f": {self.help}" if self.help else "")

    def convert(self, text: str):
        """The user's text as a value of the declared type, or a CtdaError saying why not."""
        if text.upper() == "NULL":
            return None
        try:
            return _convert(self.type, text)
        except ValueError:
            raise CtdaError(f"parameter {self.name} must be {self.type}, got {text!r}") from None


def _convert(type_name: str, text: str):
    if type_name == "BOOLEAN":
        lowered = text.lower()
        if lowered not in _TRUE | _FALSE:
            raise ValueError(text)
        return lowered in _TRUE
    return _TYPES[type_name](text)


@dataclass
class Report:
    name: str
    description: str
    sql: str
    source: str
    params: list[Param] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)

    def params_text(self) -> str:
        """One line per parameter: name, type, default and help."""
        return "\n".join(p.describe() for p in self.params)

    def bind(self, given: dict[str, object]) -> dict[str, object]:
        """Declared parameters with the user's values over the defaults: text (from the command
        line) is converted to the declared type, Python values (from the API) pass as they are."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            choices = ", ".join(known) or "none"
            raise CtdaError(f"report {self.name} has no parameter {unknown[0]!r} (parameters: {choices})")
        return {p.name: _given_or_default(p, given) for p in self.params}


def _given_or_default(param: Param, given: dict[str, object]):
    if param.name not in given:
        return param.default
    value = given[param.name]
    return param.convert(value) if isinstance(value, str) else value


def parse_report(text: str, source: str, fallback_name: str) -> Report:
    name, description, params, keys = fallback_name, "", [], []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("--"):
            break
        if stripped.startswith("-- name:"):
            name = stripped.split(":", 1)[1].strip()
        elif stripped.startswith("-- description:"):
            description = stripped.split(":", 1)[1].strip()
        elif stripped.startswith("-- key:"):
            keys = [key.strip() for key in stripped.split(":", 1)[1].split(",") if key.strip()]
        elif match := _PARAM_LINE.match(stripped):
            params.append(_param_from(match, source))
    return Report(name=name, description=description, sql=text, source=source, params=params, keys=keys)


def _param_from(match: re.Match, source: str) -> Param:
    type_name = match["type"].upper()
    if type_name not in _TYPES:
        raise CtdaError(f"{source}: parameter {match['name']} has unknown type {type_name}")
    default_text = match["default"]
    default = None if default_text in (None, "NULL") else _convert(type_name, default_text.strip("'"))
    return Param(match["name"], type_name, default, match["help"].strip())


def bundled_reports() -> dict[str, Report]:
    folder = resources.files("ctda_sql.queries")
    found = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            report = parse_report(entry.read_text(encoding="utf-8"), f"queries/{entry.name}", entry.name[:-4])
            found[report.name] = report
    return found


def folder_reports(folder: Path) -> dict[str, Report]:
    if not folder.is_dir():
        raise CtdaError(f"reports folder {folder} does not exist")
    found = {}
    for path in sorted(folder.glob("*.sql")):
        # one bad file (a folder or FIFO named x.sql, invalid UTF-8, a bad default) is skipped
        # with a warning naming it: it broke every report command, `report runs` included
        try:
            if not path.is_file():
                raise CtdaError("not a regular file")
            report = parse_report(path.read_text(encoding="utf-8"), str(path), path.stem)
        except (CtdaError, OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            reason = str(exc).removeprefix(f"{path}: ").splitlines()[0] if str(exc) else type(exc).__name__
            print(f"warning: skipped report file {path}: {reason}", file=sys.stderr)
            continue
        found[report.name] = report
    return found


def configured_folders() -> list[Path]:
    """Report folders from $CTDA_REPORTS (os.pathsep-separated), in order."""
    value = os.environ.get(REPORTS_ENV, "")
    return [Path(part) for part in value.split(os.pathsep) if part.strip()]


def all_reports(extra_folders: list[Path] | None = None) -> dict[str, Report]:
    """Bundled reports, shadowed by $CTDA_REPORTS folders, then by `extra_folders` (later win)."""
    reports = bundled_reports()
    for folder in configured_folders() + list(extra_folders or []):
        reports.update(folder_reports(Path(folder)))
    return dict(sorted(reports.items()))


def find_report(name: str, extra_folders: list[Path] | None = None) -> Report:
    reports = all_reports(extra_folders)
    if name not in reports:
        raise CtdaError(f"no report named {name!r}; available: {', '.join(reports)}")
    return reports[name]


def run_report(con, report: Report, given: dict[str, object]):
    """Execute the report with bound parameters; returns the DuckDB cursor.

    A run parameter naming no run, or a report on critical paths of a run that `analyze`
    has not seen, is a CtdaError saying so (rather than an empty result)."""
    import duckdb

    values = report.bind(given)
    _check_runs(con, report, values)
    added_up = _runs_in_scope(con, report, values)  # before the report: a query replaces its rows
    try:
        cursor = con.execute(report.sql, values)
    except duckdb.InvalidInputException as exc:
        # the report's own checks (error() in its SQL) speak as the project does, without
        # DuckDB's 'Invalid Input Error: ' prefix; other DuckDB errors keep theirs
        message = str(exc).split("\n", 1)[0]
        raise CtdaError(message.removeprefix("Invalid Input Error: ")) from None
    if len(added_up) > 1 and "run" not in [d[0] for d in cursor.description or ()]:
        # a report with no run column (hotspots) reads as one run's answer otherwise
        print(f"note: {report.name} adds up {len(added_up)} runs as one ({_run_list(added_up)}); for one run "
              f"give --param run=NAME (.report {report.name} run=NAME in the shell)", file=sys.stderr)
    return ReportCursor(cursor, report.keys)


class ReportCursor:
    """An executed report: DuckDB's cursor, with the report's key columns, which tables keep
    when they drop columns to fit (ctda_sql.cli.output reads `key_columns`)."""

    def __init__(self, cursor, key_columns: list[str]):
        self._cursor = cursor
        self.key_columns = tuple(key_columns)

    def __getattr__(self, name: str):
        return getattr(self._cursor, name)


def _runs_in_scope(con, report: Report, values: dict[str, object]) -> dict[str, bool]:
    """The runs a report given no run reads (the analysed ones, for critical-path reports);
    none when it has no run parameter or was given one."""
    if "run" not in values or values["run"] is not None:
        return {}
    needs_analysis = bool(_ANALYSIS_TABLES.search(report.sql))
    return {name: True for name, analysed in _run_status(con) if analysed or not needs_analysis}


def report_sql_run(report: Report) -> str:
    """All the SQL run_report runs for `report` (the report and its run checks): a one-shot
    connection makes only the macros this names."""
    from ctda_sql.core import sqlfiles

    return f"{report.sql}\n{sqlfiles.load('reports/run_status.sql')}"


def report_relation(con, report: Report, given: dict[str, object]):
    """The report as a DuckDB relation with bound parameters (.df(), .arrow(), .pl()), after
    the same run checks as run_report."""
    values = report.bind(given)
    _check_runs(con, report, values)
    return con.sql(report.sql, params=values)


# parameters that name a run, and the tables only `analyze` fills
_RUN_PARAMS = ("run", "run_a", "run_b")
_ANALYSIS_TABLES = re.compile(r"\b(analysis_windows|critical_path|path_events|nodes|edges)\b", re.IGNORECASE)
_LISTED_RUNS = 20


def _check_runs(con, report: Report, values: dict[str, object]) -> None:
    named = [values[p] for p in _RUN_PARAMS if values.get(p) is not None]
    needs_analysis = bool(_ANALYSIS_TABLES.search(report.sql))
    if not named and not needs_analysis:
        return
    status = dict(_run_status(con))
    for run in named:
        if run not in status:
            raise CtdaError(f"no run named {run!r}; runs: {_run_list(status)}")
    if not needs_analysis:
        return
    for run in named:
        if not status[run]:
            raise CtdaError(f"run {run!r} has not been analysed; run `ctda-sql analyze --run {run}` "
                            f"(or .analyze --run {run} in the shell) first")
    if not named and status and not any(status.values()):
        raise CtdaError(f"report {report.name} reads critical paths and no run has been analysed; "
                        "run `ctda-sql analyze` (or .analyze in the shell) first")


def _run_status(con) -> list[tuple[str, bool]]:
    from ctda_sql.core import sqlfiles

    return con.execute(sqlfiles.load("reports/run_status.sql")).fetchall()


def _run_list(status: dict[str, bool]) -> str:
    if not status:
        return "none yet (ctda-sql ingest loads one)"
    names = list(status)
    more = f" and {len(names) - _LISTED_RUNS} more" if len(names) > _LISTED_RUNS else ""
    return ", ".join(names[:_LISTED_RUNS]) + more
