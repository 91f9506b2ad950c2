"""The work a Dask worker does for a lake: each task runs its own in-memory DuckDB warehouse
(connection.connect(":memory:"): the usual schema and macros), so ingest's SQL and the
analysis engine run unchanged on one (run, rank) at a time.

Tasks return a TaskFailure for bad input (a CtdaError) instead of raising it: exceptions
travel back to the client pickled, and ours need not unpickle; the client turns the failure
into one `error:` line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import lake, sqlfiles
from .errors import CtdaError
from .ingest import IngestResult, derive_trace


@dataclass
class TaskFailure:
    message: str


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parse_file(path: str, threads: int):
    """traceio.read_trace on the worker; the ParsedTrace stays there for write_ingest."""
    from .traceio import read_trace

    try:
        return read_trace(Path(path), threads)
    except CtdaError as exc:
        return TaskFailure(str(exc))


def trace_summary(parsed) -> dict | TaskFailure:
    """What the client needs to assign the run and its origin: small, unlike the trace."""
    if isinstance(parsed, TaskFailure):
        return parsed
    start = None
    if parsed.min_ts is not None:
        start = parsed.min_ts * parsed.ts_scale + parsed.ts_offset_us
    return {"path": str(parsed.path), "rank": parsed.rank, "sha256": parsed.sha256, "start": start}


def _warehouse(threads: int):
    from .connection import connect

    con = connect(":memory:", for_sql="")  # ingest and the engine call no Python UDF
    con.execute(f"SET threads = {max(1, int(threads))}")
    return con


def _insert_run(con, run: dict) -> None:
    con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                [run["run_id"], run["name"], run["ingested_at"], run["meta"], Decimal(run["origin_ts"])])


def write_ingest(parsed, lake_dir: str, run: dict, threads: int) -> dict | TaskFailure:
    """Load one parsed trace into a fresh in-memory warehouse as rank `parsed.rank` of `run`
    (ingest's own SQL), then publish its events, steps, threads and traces partitions (traces
    last) and drop the rank's earlier analysis partitions."""
    if isinstance(parsed, TaskFailure):
        return parsed
    root = Path(lake_dir)
    con = _warehouse(threads)
    try:
        run_id, rank = run["run_id"], parsed.rank
        _insert_run(con, run)
        con.register("parsed_events", parsed.events)
        con.execute(sqlfiles.load("lake/typed_events.sql"),
                    {"rank": rank, "ts_scale": parsed.ts_scale, "ts_offset_us": parsed.ts_offset_us})
        con.unregister("parsed_events")
        con.execute("SET threads = 1")  # one ordered insert, as ingest does
        con.execute(sqlfiles.load("ingest/events.sql"), {"run_id": run_id, "origin_ts": Decimal(run["origin_ts"])})
        con.execute(f"SET threads = {max(1, int(threads))}")
        con.execute("DROP TABLE typed_events")
        lines = IngestResult(run_name=run["name"], run_id=run_id)
        derive_trace(con, parsed, run_id, lines)  # threads, steps, the traces row, as ingest does
        staging = lake.stage_tables(con, root, lake.INGEST_TABLES, run["name"], run_id, rank)
        lake.drop_partitions(root, lake.ANALYSIS_TABLES + lake.CROSS_RANK_TABLES, run["name"], rank)
        lake.publish_staged(staging, root, lake.INGEST_TABLES, run["name"], rank)
    except CtdaError as exc:
        return TaskFailure(str(exc))
    finally:
        con.close()
    return {"rank": rank, "loaded": lines.loaded[0], "warnings": lines.warnings}


# ---- analyze ---------------------------------------------------------------------------------

def load_rank(con, root: Path, run: dict, rank: int, tables: tuple[str, ...]) -> None:
    """The (run, rank) partitions of `tables` into the warehouse tables of `con`."""
    for table in tables:
        files = lake.partition_files(root, table, run["name"], rank)
        if not files:
            continue
        rows = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
        if rows.num_rows == 0:
            continue
        con.register("lake_rows", rows)
        order = " ORDER BY event_id" if table == "events" else ""  # the file order, as ingest keeps it
        con.execute(f'INSERT INTO "{table}" BY NAME SELECT *, CAST(? AS INTEGER) AS rank FROM lake_rows{order}',
                    [rank])
        con.unregister("lake_rows")


def analyze_rank(lake_dir: str, run: dict, rank: int, methods: list[str], window: str | None,
                 settings: dict, threads: int) -> dict | TaskFailure:
    """The analysis engine (analyze.analyze, unchanged) on one rank's partitions; publishes
    the rank's analysis partitions (earlier results of other methods kept, as analyze does)."""
    from .analyze import AnalysisSettings, analyze

    root = Path(lake_dir)
    con = _warehouse(threads)
    try:
        _insert_run(con, run)
        load_rank(con, root, run, rank, lake.PARTITIONED)
        for method in methods:
            try:
                analyze(con, run=run["name"], method=method, window_prefix=window, show_progress=False,
                        settings=AnalysisSettings(**settings))
            except CtdaError as exc:
                if "nothing to analyze" not in str(exc):
                    raise
        windows, nodes = con.execute(
            "SELECT (SELECT count(*) FROM analysis_windows), (SELECT count(*) FROM nodes)").fetchone()
        staging = lake.stage_tables(con, root, lake.ANALYSIS_TABLES, run["name"], run["run_id"], rank)
        lake.publish_staged(staging, root, lake.ANALYSIS_TABLES, run["name"], rank)
    except CtdaError as exc:
        return TaskFailure(f"run {run['name']} rank {rank}: {exc}")
    finally:
        con.close()
    return {"rank": rank, "windows": windows, "nodes": nodes}


def analyze_run(lake_dir: str, run: dict, ranks: list[int], window: str | None, settings: dict,
                threads: int) -> dict | TaskFailure:
    """ctda and the cross-rank path of one run (analyze.analyze with method cross_rank,
    unchanged) over all of its ranks' partitions in one in-memory warehouse; publishes every
    rank's analysis and cross-rank partitions, then its traces partition (clock offsets)."""
    from .analyze import AnalysisSettings, analyze

    root = Path(lake_dir)
    con = _warehouse(threads)
    try:
        _insert_run(con, run)
        for rank in ranks:
            load_rank(con, root, run, rank, lake.PARTITIONED)
        summary = analyze(con, run=run["name"], method="cross_rank", window_prefix=window, show_progress=False,
                          settings=AnalysisSettings(**settings))
        tables = lake.ANALYSIS_TABLES + lake.CROSS_RANK_TABLES + ("traces",)
        for rank in ranks:
            staging = lake.stage_tables(con, root, tables, run["name"], run["run_id"], rank)
            lake.publish_staged(staging, root, tables, run["name"], rank)
    except CtdaError as exc:
        return TaskFailure(f"run {run['name']}: {exc}")
    finally:
        con.close()
    matched = [line.strip() for line in summary.splitlines() if "collective instances matched" in line]
    return {"run": run["name"], "lines": matched}
