"""The Python API: one `Warehouse` object for notebooks and scripts; the CLI and the shell
call the same methods.

    from warehouse import Warehouse
    with Warehouse("ctda.duckdb") as wh:
        wh.ingest(["traces/job42/"], run="job42", meta={"batch_size": 64})
        wh.analyze(run="job42")
        wh.report("cpcr", run="job42").df()

    with Warehouse(lake="lake/", workers=2) as wh:  # the same over a Parquet lake on Dask
        wh.ingest(["traces/job42/"], run="job42")

Results that are tables come back as DuckDB relations, so `.df()`, `.arrow()`, `.pl()`,
`.fetchall()` all work; they read the open database, so use them before `close()`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from .connection import connect, resolve_db_path
from .errors import CtdaError

if TYPE_CHECKING:  # ingest imports pyarrow and numpy (~0.2 s): only commands that ingest pay it
    from .ingest import IngestResult


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
        if lake is not None and db is not None:
            raise CtdaError("give a database file or a lake folder, not both")
        if lake is None and (workers is not None or scheduler is not None):
            raise CtdaError("workers and scheduler need lake=DIR")
        self.lake = Path(lake) if lake is not None else None
        self.workers, self.scheduler = workers, scheduler
        self.path = self.lake or (Path(db) if db is not None else resolve_db_path(None))
        self.read_only = read_only
        self.safe = safe
        self._udfs_for = udfs_for
        self._macros_for = macros_for
        self._con: duckdb.DuckDBPyConnection | None = None
        self._owns_connection = True

    @classmethod
    def on_connection(cls, con: duckdb.DuckDBPyConnection, path: str | Path = ":memory:") -> Warehouse:
        """A Warehouse over a connection already open (the shell's); close() leaves it open."""
        wh = cls(path)
        wh._con, wh._owns_connection = con, False
        return wh

    # ---- connection ---------------------------------------------------------------------

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection (opened on first use)."""
        if self._con is None and self.lake is not None:
            from .lake import open_lake

            self._con = open_lake(self.lake, for_sql=self._udfs_for, safe=self.safe, macros_for=self._macros_for)
        elif self._con is None:
            self._con = connect(self.path, read_only=self.read_only, for_sql=self._udfs_for, safe=self.safe,
                                macros_for=self._macros_for)
        return self._con

    def close(self) -> None:
        if self._con is not None and self._owns_connection:
            self._con.close()
        self._con = None

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.lake is not None:
            return f"Warehouse(lake={str(self.lake)!r})"
        mode = "read-only" if self.read_only else "read-write"
        return f"Warehouse({str(self.path)!r}, {mode})"

    # ---- loading and analysis ------------------------------------------------------------

    def ingest(self, paths, run: str | None = None, meta: dict | None = None,
               replace: bool = False, show_progress: bool = False) -> IngestResult:
        """Load trace files or folders of rank files as one run, all or nothing."""
        from .ingest import collect_files, ingest

        if isinstance(paths, (str, Path)):
            paths = [paths]
        collect_files(paths)  # a missing file fails here, before a database is opened or made
        if self.lake is not None:
            return self._on_lake("ingest", list(paths), run=run, meta=meta, replace=replace,
                                 show_progress=show_progress)
        # ingest refreshes run_meta inside its transaction: new meta keys become columns
        return ingest(self.con, list(paths), run_name=run, meta=meta, replace=replace,
                      show_progress=show_progress)

    def analyze(self, run: str | None = None, method: str = "all", window: str | None = None,
                wait_gap_us: float | None = None, split_starved: bool = True,
                show_progress: bool = False) -> str:
        """Build nodes, edges and critical_path for every step of every rank (of `run`);
        returns the summary (windows, nodes, mean CPCR per method)."""
        from .analyze import AnalysisSettings, analyze

        settings = AnalysisSettings(split_starved=split_starved)
        if wait_gap_us is not None:
            if not 0 <= wait_gap_us < float("inf"):  # NaN fails both comparisons
                raise CtdaError(f"wait_gap_us must be a finite number >= 0, got {wait_gap_us}")
            settings = replace(settings, wait_gap_us=float(wait_gap_us))
        if self.lake is not None:
            return self._on_lake("analyze", run=run, method=method, window=window, settings=settings,
                                 show_progress=show_progress)
        return analyze(self.con, run=run, method=method, window_prefix=window,
                       show_progress=show_progress, settings=settings)

    def _on_lake(self, command: str, *args, **kwargs):
        """Run a lake ingest or analyze on Dask; the session's views are re-made afterwards."""
        from .lake_run import analyze_lake, dask_client, ingest_lake

        if self.read_only:
            raise CtdaError("this Warehouse is read-only")
        work = ingest_lake if command == "ingest" else analyze_lake
        with dask_client(self.workers, self.scheduler) as client:
            result = work(client, self.lake, *args, **kwargs)
        self.close()  # new partitions: the next use opens fresh views over them
        return result

    def load_experiments(self, path: str | Path, key: str) -> int:
        """Load experiment metadata (csv, json, parquet) keyed by run name into `experiments`;
        returns the number of rows loaded."""
        from .experiments import load_experiments

        return load_experiments(self.con, Path(path), key)

    # ---- reading -------------------------------------------------------------------------

    def report(self, name: str, /, reports_dirs: list[str | Path] | None = None,
               **params) -> duckdb.DuckDBPyRelation:
        """A saved report (see `reports()`) with its parameters bound, as a relation."""
        from .reports import find_report, report_relation

        found = find_report(name, [Path(d) for d in reports_dirs or []])
        return report_relation(self.con, found, params)

    def reports(self, reports_dirs: list[str | Path] | None = None) -> duckdb.DuckDBPyRelation:
        """The saved reports: name, description, params."""
        from .reports import all_reports

        import pyarrow as pa

        found = all_reports([Path(d) for d in reports_dirs or []]).values()
        return self.con.from_arrow(pa.table({
            "name": [r.name for r in found],
            "description": [r.description for r in found],
            "params": [r.params_text() for r in found],  # one line each: type, default, help
        }))

    def sql(self, text: str, params: dict | list | None = None) -> duckdb.DuckDBPyRelation | None:
        """One SQL statement with bound parameters; a relation for queries, None for others."""
        if not text or not text.strip():
            raise CtdaError("no SQL given")
        return self.con.sql(text, params=params)

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
        from .whatif import event_categories, whatif
        from .whatif_changes import Scenario, parse_scale

        categories = event_categories(self.con) if scale else set()
        scenario = Scenario(scales=tuple(parse_scale(f"{pattern}={factor}", categories)
                                         for pattern, factor in (scale or {}).items()),
                            bandwidth_scale=comm_bandwidth_scale, latency_us=comm_latency_us,
                            allreduce=allreduce, world_size=world_size)
        if cluster is not None:  # a TOML path or dict: projected onto it (warehouse/whatif_cluster.py)
            from .whatif_cluster import api_whatif
            return api_whatif(self, cluster, scenario, run=run, rank=rank, step=step, name=name, coupled=coupled)
        scenario_name = name or scenario.as_json()
        whatif(self.con, run=run, rank=rank, step=step, scenario=scenario, name=scenario_name, coupled=coupled)
        self._finish_pending_result()
        return self.con.sql("SELECT * FROM whatif_steps WHERE scenario = $name ORDER BY ALL",
                            params={"name": scenario_name})

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
        from .export import write_overlay

        if isinstance(methods, str):
            methods = [methods]
        return write_overlay(self.con, Path(path), run, rank, list(methods))

    def export_html(self, path: str | Path, run: str, step: int | None = None,
                    rank: int | None = None) -> dict:
        """Write one self-contained HTML report of the run with plots; returns what it holds."""
        from .report_html import write_html

        return write_html(self.con, Path(path), run, step=step, rank=rank)
