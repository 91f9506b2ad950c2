"""The Python API: one `Warehouse` object for notebooks and scripts; the CLI and the shell
call the same methods.

    from ctda_sql import Warehouse
    with Warehouse("ctda.duckdb") as wh:
        wh.ingest(["traces/job42/"], run="job42", meta={"batch_size": 64})
        wh.analyze(run="job42")
        wh.report("cpcr", run="job42").df()

    with Warehouse(lake="lake/", workers=2) as wh:  # the same over a Parquet lake on Dask
        wh.ingest(["traces/job42/"], run="job42")

Results that are tables come back as DuckDB relations, so `.df()`, `.arrow()`, `.pl()`,
`.fetchall()` all work; they read the open database, so use them before `close()`.

An argument of the wrong kind or value (a run that is not text, a step that is not a whole
number, a parameter the SQL lacks) is a CtdaError naming the argument, as the command line's
errors are; so is any use of a Warehouse after close(). Errors in SQL you wrote yourself
(`sql()`) are DuckDB's own.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import duckdb

from ctda_sql.core.connection import connect, resolve_db_path
from ctda_sql.core.errors import CtdaError, first_line

if TYPE_CHECKING:  # ingest imports pyarrow and numpy (~0.2 s): only commands that ingest pay it
    from ctda_sql.ingest.load import IngestResult


# ---- arguments: a wrong kind is one CtdaError naming the argument, not DuckDB's cast error ----

def _text(name: str, value, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise CtdaError(f"{name} must be text, got {value!r}")
    return value


def _whole(name: str, value) -> int | None:
    return _numeric(name, value, numbers.Integral, "a whole number", int)


def _number(name: str, value) -> float | None:
    return _numeric(name, value, numbers.Real, "a number", float)


def _numeric(name: str, value, kind, words: str, convert):
    """None, or `value` as `convert` makes it when it is a `kind` (True is no number here)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise CtdaError(f"{name} must be {words}, got {value!r}")
    return convert(value)


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise CtdaError(f"{name} must be True or False, got {value!r}")
    return value


def _path(name: str, value) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise CtdaError(f"{name} must be a path (str or Path), got {value!r}")
    return Path(value)


def _paths(name: str, value, what: str = "path", allow_empty: bool = False) -> list:
    """One path, or an iterable of them (kept as given: the ingest lines show them so)."""
    if isinstance(value, (str, os.PathLike)):
        return [value]
    if not isinstance(value, Iterable) or isinstance(value, (bytes, Mapping)):
        raise CtdaError(f"{name} must be a {what} or a list of {what}s, got {value!r}")
    paths = list(value)
    for item in paths:
        _path(name, item)
    if not paths and not allow_empty:
        raise CtdaError(f"{name} is empty: give a trace file or a folder of rank files")
    return paths


_SCALARS = (str, int, float, bool)


def _scalars(name: str, value) -> dict | None:
    """A mapping of text keys to text, number or bool values."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise CtdaError(f"{name} must be a dict, got {value!r}")
    for key, item in value.items():
        if not isinstance(key, str):
            raise CtdaError(f"{name} keys must be text, got {key!r}")
        if not isinstance(item, _SCALARS):
            raise CtdaError(f"{name}[{key!r}] must be text, a number or a bool, got {item!r}")
    return dict(value)


class Warehouse:
    """A ctda-sql database: ingest traces, analyse critical paths, run reports and SQL, export.

    db: the database file (default: $CTDA_DB, else ./ctda.duckdb); ":memory:" works too.
    read_only: open without write access (reports and SQL only; several readers may share it).
    udfs_for: register only the Python UDFs this SQL names (one-shot commands start faster);
    None registers them all.
    safe: SQL can read or write no file but the warehouse (for warehouses shared with others).
    lake: a Parquet lake folder instead of a database file (docs/scale-out.md): ingest and
    analyze run on Dask (`workers` local processes, or the cluster at `scheduler`); reports
    and SQL read views over the lake; tables made by SQL or whatif live only in the session.
    macros_for: the only SQL this Warehouse will run (one-shot commands): only the macros it
    needs are made; None makes them all."""

    def __init__(self, db: str | Path | None = None, *, read_only: bool = False,
                 udfs_for: str | None = None, safe: bool = False, macros_for: str | None = None,
                 lake: str | Path | None = None, workers: int | None = None, scheduler: str | None = None):
        db = None if db is None else _path("db", db)
        lake = None if lake is None else _path("lake", lake)
        _flag("read_only", read_only)
        _flag("safe", safe)
        if lake is not None and db is not None:
            raise CtdaError("give a database file or a lake folder, not both")
        if lake is None and (workers is not None or scheduler is not None):
            raise CtdaError("workers and scheduler need lake=DIR")
        self.lake = Path(lake) if lake is not None else None
        self.path = self.lake or (Path(db) if db is not None else resolve_db_path(None))
        self.read_only = read_only
        self._store: _Store = (_LakeStore(self.lake, workers, scheduler) if self.lake is not None
                               else _FileStore(self.path))
        self.safe = safe
        self._udfs_for = udfs_for
        self._macros_for = macros_for
        self._con: duckdb.DuckDBPyConnection | None = None
        self._owns_connection = True
        self._closed = False

    @classmethod
    def on_connection(cls, con: duckdb.DuckDBPyConnection, path: str | Path = ":memory:") -> Warehouse:
        """A Warehouse over a connection already open (the shell's); close() leaves it open."""
        wh = cls(path)
        wh._con, wh._owns_connection = con, False
        return wh

    # ---- connection ---------------------------------------------------------------------

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection (opened on first use); after close() a CtdaError, rather than
        opening the database again without a word and holding its lock."""
        self._check_open()
        if self._con is None:
            self._con = self._store.connect(read_only=self.read_only, for_sql=self._udfs_for, safe=self.safe,
                                            macros_for=self._macros_for)
        return self._con

    def close(self) -> None:
        """Close the database (a borrowed connection stays open); using this Warehouse
        afterwards is a CtdaError. Closing twice is fine."""
        self._drop_connection()
        self._closed = True

    def _drop_connection(self) -> None:
        if self._con is not None and self._owns_connection:
            self._con.close()
        self._con = None

    def _check_open(self) -> None:
        if self._closed:
            raise CtdaError(f"{self!r} is closed; open a new Warehouse to use it again")

    def __enter__(self) -> Warehouse:
        self._check_open()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Warehouse({self._store.describe(self.read_only)})"

    # ---- loading and analysis ------------------------------------------------------------

    def ingest(self, paths, run: str | None = None, meta: dict | None = None,
               replace: bool = False, show_progress: bool = False) -> IngestResult:
        """Load trace files or folders of rank files as one run, all or nothing."""
        from ctda_sql.ingest.load import collect_files

        paths = _paths("paths", paths)
        run, meta = _text("run", run), _scalars("meta", meta)
        _flag("replace", replace)
        self._check_open()  # before any file is read
        collect_files(paths)  # a missing file fails here, before a database is opened or made
        return self._store.ingest(self, list(paths), run=run, meta=meta, replace=replace,
                                  show_progress=show_progress)

    def analyze(self, run: str | None = None, method: str = "all", window: str | None = None,
                wait_gap_us: float | None = None, split_starved: bool = True,
                show_progress: bool = False) -> str:
        """Build nodes, edges and critical_path for every step of every rank (of `run`);
        returns the summary (windows, nodes, mean CPCR per method)."""
        from ctda_sql.engine.analyze import analysis_settings

        run, method, window = _text("run", run), _text("method", method, optional=False), _text("window", window)
        settings = analysis_settings(_number("wait_gap_us", wait_gap_us),
                                     split_starved=_flag("split_starved", split_starved))
        return self._store.analyze(self, run=run, method=method, window=window, settings=settings,
                                   show_progress=show_progress)

    def load_experiments(self, path: str | Path, key: str) -> int:
        """Load experiment metadata (csv, json, parquet) keyed by run name into `experiments`;
        returns the number of rows loaded."""
        from ctda_sql.ingest.experiments import load_experiments

        path, key = _path("path", path), _text("key", key, optional=False)
        return load_experiments(self.con, path, key)

    # ---- reading -------------------------------------------------------------------------

    def report(self, name: str, /, reports_dirs: list[str | Path] | None = None,
               **params) -> duckdb.DuckDBPyRelation:
        """A saved report (see `reports()`) with its parameters bound, as a relation."""
        from ctda_sql.engine.reports import find_report, report_relation

        found = find_report(_text("name", name, optional=False), _folders(reports_dirs))
        for key, value in params.items():
            _check_param(found, key, value)
        return report_relation(self.con, found, params)

    def reports(self, reports_dirs: list[str | Path] | None = None) -> duckdb.DuckDBPyRelation:
        """The saved reports: name, description, params."""
        import pyarrow as pa

        from ctda_sql.engine.reports import all_reports

        found = all_reports(_folders(reports_dirs)).values()
        return self.con.from_arrow(pa.table({
            "name": [r.name for r in found],
            "description": [r.description for r in found],
            "params": [r.params_text() for r in found],  # one line each: type, default, help
        }))

    def sql(self, text: str, params: dict | list | None = None) -> duckdb.DuckDBPyRelation | None:
        """One SQL statement with bound parameters; a relation for queries, None for others."""
        if text is not None and not isinstance(text, str):
            raise CtdaError(f"text must be SQL text, got {text!r}")
        if not text or not text.strip():
            raise CtdaError("no SQL given")
        if params is not None and not isinstance(params, (Mapping, list, tuple)):
            raise CtdaError(f"params must be a dict (for $name) or a list (for ?), got {params!r}")
        con = self.con
        try:
            return con.sql(text, params=params)
        except (duckdb.InvalidInputException, duckdb.BinderException, duckdb.NotImplementedException) as exc:
            if "parameter" not in str(exc).lower():
                raise  # the SQL's own error
            raise CtdaError(f"params do not match the SQL's parameters: {first_line(exc)}") from None

    def whatif(self, run: str | None = None, rank: int | None = None, step: int | None = None,
               scale: dict[str, float] | None = None, comm_bandwidth_scale: float = 1.0,
               comm_latency_us: float | None = None, allreduce: str | None = None,
               world_size: int | None = None, name: str | None = None,
               coupled: bool = True, cluster=None) -> duckdb.DuckDBPyRelation:
        """Replay every analysed step under the changes (docs/whatif.md) and return its rows
        of whatif_steps. scale: {"[rankN:][CATEGORY:]PATTERN": factor}, e.g.
        {"kernel:*gemm*": 0.5} or {"rank1:user_annotation:slow_rank": 0}; the ranks of a
        multi-rank run are replayed together unless `coupled` is False; the rows persist under
        scenario `name` (default: the changes as JSON)."""
        from ctda_sql.whatif.changes import Scenario, parse_scale
        from ctda_sql.whatif.replay import event_categories, whatif

        run, name, allreduce = _text("run", run), _text("name", name), _text("allreduce", allreduce)
        rank, step, world_size = _whole("rank", rank), _whole("step", step), _whole("world_size", world_size)
        comm_bandwidth_scale = _number("comm_bandwidth_scale", comm_bandwidth_scale)
        comm_latency_us = _number("comm_latency_us", comm_latency_us)
        _flag("coupled", coupled)
        if scale is not None:
            if not isinstance(scale, Mapping) or not all(isinstance(k, str) for k in scale):
                raise CtdaError(f"scale must be a dict of '[rankN:][CATEGORY:]PATTERN' to factor, got {scale!r}")
            for pattern, factor in scale.items():
                _number(f"scale[{pattern!r}]", factor)
        categories = event_categories(self.con) if scale else set()
        scenario = Scenario(scales=tuple(parse_scale(f"{pattern}={factor}", categories)
                                         for pattern, factor in (scale or {}).items()),
                            bandwidth_scale=comm_bandwidth_scale, latency_us=comm_latency_us,
                            allreduce=allreduce, world_size=world_size)
        if cluster is not None:  # a TOML path or dict: projected onto it (warehouse/whatif/cluster.py)
            from ctda_sql.whatif.cluster import whatif_on_cluster
            scenario_name = whatif_on_cluster(self.con, cluster, scenario, run=run, rank=rank, step=step,
                                              name=name, coupled=coupled)
        else:
            scenario_name = name or scenario.as_json()
            whatif(self.con, run=run, rank=rank, step=step, scenario=scenario, name=scenario_name, coupled=coupled)
        self._finish_pending_result()
        return self.con.sql("SELECT * FROM whatif_steps WHERE scenario = $name ORDER BY ALL",
                            params={"name": scenario_name})

    def advise(self, run: str | None = None, rank: int | None = None, step: int | None = None,
               top: int = 10, profile_top: int = 10) -> dict:
        """What to fix first and what it buys (docs/advice.md): the findings, ranked by the
        saving the what-if replay predicts, and the causal profile of the path's largest regions,
        as one JSON-ready dict; the run's rows of advice_findings / advice_profile are replaced."""
        from ctda_sql.advice.advise import advise

        run, rank, step, top = _text("run", run), _whole("rank", rank), _whole("step", step), _whole("top", top)
        self._refuse_on_lake("advise")
        profile_top = _whole("profile_top", profile_top)
        document = advise(self.con, run=run, rank=rank, step=step, top=10 if top is None else top,
                          profile_top=10 if profile_top is None else profile_top)
        self._finish_pending_result()
        return document

    def diff(self, run_a: str, run_b: str, rank: int | None = None) -> dict:
        """Why run B's step differs from run A's, along their critical paths (docs/advice.md):
        rows by region whose deltas, with `unexplained_us`, sum exactly to the difference."""
        from ctda_sql.advice.diff import diff

        run_a, run_b = _text("run_a", run_a, optional=False), _text("run_b", run_b, optional=False)
        rank = _whole("rank", rank)
        self._refuse_on_lake("diff")
        return diff(self.con, run_a, run_b, rank=rank)

    def _refuse_on_lake(self, command: str) -> None:
        self._store.refuse_unless_database(command)

    def _finish_pending_result(self) -> None:
        """DuckDB refuses a new relation while a result of execute() is unread: read it."""
        try:
            self.con.fetchall()
        except duckdb.Error:
            pass  # nothing pending

    # ---- exports -------------------------------------------------------------------------

    def export_overlay(self, path: str | Path, run: str, rank: int | None = None,
                       methods: tuple[str, ...] | list[str] | str = ("ctda",)) -> dict:
        """Write the run's trace (one rank, or all ranks with a process per rank) with the
        critical path marked, for Perfetto UI and chrome://tracing; returns counts."""
        from ctda_sql.export.overlay import write_overlay

        path, run, rank = _path("path", path), _text("run", run, optional=False), _whole("rank", rank)
        if isinstance(methods, str):
            methods = [methods]
        if not isinstance(methods, Iterable) or not all(isinstance(m, str) for m in methods):
            raise CtdaError(f"methods must be a method name or a list of them, got {methods!r}")
        return write_overlay(self.con, path, run, rank, list(methods))

    def export_html(self, path: str | Path, run: str, step: int | None = None,
                    rank: int | None = None, compare: str | None = None) -> dict:
        """Write one self-contained HTML report of the run with plots; returns what it holds.
        With `compare` (another run), the report opens with why this run's median step differs
        from that run's, along the critical paths (docs/advice.md, `diff`)."""
        from ctda_sql.export.html import write_html

        path, run, compare = _path("path", path), _text("run", run, optional=False), _text("compare", compare)
        return write_html(self.con, path, run, step=_whole("step", step), rank=_whole("rank", rank), compare=compare)


# ---- where the data lives: a database file or a Parquet lake ------------------------------

class _Store(Protocol):
    """What differs between a database file and a lake; everything else a Warehouse does
    (reports, SQL, what-if, exports) runs on the connection `connect` opens."""

    def connect(self, *, read_only: bool, for_sql: str | None, safe: bool,
                macros_for: str | None) -> duckdb.DuckDBPyConnection: ...
    def ingest(self, wh: Warehouse, paths: list, **options) -> IngestResult: ...
    def analyze(self, wh: Warehouse, **options) -> str: ...
    def refuse_unless_database(self, command: str) -> None: ...
    def describe(self, read_only: bool) -> str: ...


class _FileStore:
    def __init__(self, path: Path):
        self.path = path

    def connect(self, *, read_only, for_sql, safe, macros_for):
        return connect(self.path, read_only=read_only, for_sql=for_sql, safe=safe, macros_for=macros_for)

    def ingest(self, wh, paths, *, run, meta, replace, show_progress):
        from ctda_sql.ingest.load import ingest

        # ingest refreshes run_meta inside its transaction: new meta keys become columns
        return ingest(wh.con, paths, run_name=run, meta=meta, replace=replace, show_progress=show_progress)

    def analyze(self, wh, *, run, method, window, settings, show_progress):
        from ctda_sql.engine.analyze import analyze

        return analyze(wh.con, run=run, method=method, window_prefix=window, show_progress=show_progress,
                       settings=settings)

    def refuse_unless_database(self, command):
        return None

    def describe(self, read_only):
        return f"{str(self.path)!r}, {'read-only' if read_only else 'read-write'}"


class _LakeStore:
    """Ingest and analyze run on Dask (`workers` local processes, or the cluster at
    `scheduler`); reads go through views over the lake's Parquet files."""

    def __init__(self, folder: Path, workers: int | None, scheduler: str | None):
        self.folder, self.workers, self.scheduler = folder, workers, scheduler

    def connect(self, *, read_only, for_sql, safe, macros_for):
        from ctda_sql.lake.views import open_lake

        return open_lake(self.folder, for_sql=for_sql, safe=safe, macros_for=macros_for)

    def ingest(self, wh, paths, **options):
        from ctda_sql.lake.run import ingest_lake

        return self._on_dask(wh, ingest_lake, paths, **options)

    def analyze(self, wh, **options):
        from ctda_sql.lake.run import analyze_lake

        return self._on_dask(wh, analyze_lake, **options)

    def _on_dask(self, wh, work, *args, **options):
        from ctda_sql.lake.cluster import dask_client

        if wh.read_only:
            raise CtdaError("this Warehouse is read-only")
        wh._check_open()  # before any work starts
        with dask_client(self.workers, self.scheduler) as client:
            result = work(client, self.folder, *args, **options)
        wh._drop_connection()  # new partitions: the next use opens fresh views over them
        return result

    def refuse_unless_database(self, command):
        raise CtdaError(f"{command} needs a warehouse database, not a lake: ingest the run into one "
                        f"(ctda-sql ingest PATH --db FILE --analyze)")

    def describe(self, read_only):
        return f"lake={str(self.folder)!r}"


def _folders(reports_dirs) -> list[Path]:
    """reports_dirs: a folder, or a list of them (a single str is one folder, not its letters)."""
    if reports_dirs is None:
        return []
    return [Path(folder) for folder in _paths("reports_dirs", reports_dirs, "folder", allow_empty=True)]


_PARAM_KINDS = {"INTEGER": (numbers.Integral, "a whole number"), "BIGINT": (numbers.Integral, "a whole number"),
                "DOUBLE": (numbers.Real, "a number"), "BOOLEAN": (bool, "True or False"), "VARCHAR": (str, "text")}


def _check_param(report, key: str, value) -> None:
    """A report parameter given as a Python value has the declared type (text is converted
    by the report as the command line's is); unknown names are the report's to refuse."""
    declared = next((p for p in report.params if p.name == key), None)
    if declared is None or value is None or isinstance(value, str):
        return
    kind, words = _PARAM_KINDS.get(declared.type, (object, declared.type))
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise CtdaError(f"parameter {key} must be {words} ({declared.type}), got {value!r}")
