"""The work a Dask worker does for a lake: each task runs its own in-memory DuckDB warehouse
(connection.connect(":memory:"): the usual schema and macros), so ingest's SQL and the
analysis engine run unchanged on one (run, rank) at a time.

Tasks return a TaskFailure for bad input (a CtdaError) instead of raising it: exceptions
travel back to the client pickled, and ours need not unpickle; the client turns the failure
into one `error:` line.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import duckdb

from ctda_sql.core import sqlfiles, stages
from ctda_sql.core.connection import duckdb_path
from ctda_sql.core.errors import CtdaError
from ctda_sql.ingest.load import IngestResult, derive_trace
from ctda_sql.lake import store as lake


@dataclass
class TaskFailure:
    message: str


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class SpilledTrace:
    """A parsed trace whose events wait for the write task in an Arrow file under the lake's
    staging folder: the write phase needs the whole batch parsed first (the run's time origin
    is its earliest timestamp), and holding every parsed table in worker memory would grow a
    worker by every rank's events. The task's result holds only the file's path, so
    Dask keeps or moves a few hundred bytes, and the write task, on whichever worker, maps the
    file from the lake's shared folder for its insert and then removes the folder."""

    parsed: object  # traceio.ParsedTrace, its events in `folder` (parsed.events_file)
    folder: Path


def parse_file(path: str, threads: int, lake_dir: str) -> SpilledTrace | TaskFailure:
    """traceio.read_trace on the worker, its events spilled to LAKE/_tmp for write_ingest."""
    from ctda_sql.ingest.traceio import read_trace

    try:
        parsed = read_trace(Path(path), threads)
    except CtdaError as exc:
        return TaskFailure(str(exc))
    folder = lake.new_staging_dir(Path(lake_dir))
    parsed.spill_events(folder / "events.arrow")
    return SpilledTrace(parsed, folder)


def trace_summary(spilled: SpilledTrace | TaskFailure) -> dict | TaskFailure:
    """What the client needs to assign the run and its origin: small, unlike the trace."""
    if isinstance(spilled, TaskFailure):
        return spilled
    parsed, start = spilled.parsed, None
    if parsed.min_ts is not None:
        start = parsed.min_ts * parsed.ts_scale + parsed.ts_offset_us
    return {"path": str(parsed.path), "rank": parsed.rank, "sha256": parsed.sha256, "start": start}


def discard_spilled(spilled: SpilledTrace | TaskFailure) -> None:
    """Remove a trace's spilled events: its write task is over, whatever its outcome."""
    if isinstance(spilled, SpilledTrace):
        shutil.rmtree(spilled.folder, ignore_errors=True)


def _warehouse(threads: int, *sql_folders: str):
    """A scratch in-memory warehouse with only the macros that the SQL of `sql_folders` (the
    folders the task runs) names: all of them and the table comments cost ~0.3 s a task."""
    from ctda_sql.core.connection import connect, sql_of_folders

    # ingest and the engine call no Python UDF
    con = connect(":memory:", for_sql="", macros_for=sql_of_folders(*sql_folders), scratch=True)
    con.execute(f"SET threads = {max(1, int(threads))}")
    return con


def _insert_run(con, run: dict) -> None:
    con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                [run["run_id"], run["name"], run["ingested_at"], run["meta"], Decimal(run["origin_ts"])])


def write_ingest(spilled: SpilledTrace | TaskFailure, lake_dir: str, run: dict, threads: int) -> dict | TaskFailure:
    """Make one parsed trace's events rows (ingest's own SQL) as rank `parsed.rank` of `run`,
    derive its threads, steps and traces row in a fresh in-memory warehouse as ingest does,
    then publish its events, steps, threads and traces partitions (traces last) and drop the
    rank's earlier analysis partitions."""
    if isinstance(spilled, TaskFailure):
        return spilled
    parsed, root = spilled.parsed, Path(lake_dir)
    con = _warehouse(threads, "ingest", "views")
    try:
        run_id, rank = run["run_id"], parsed.rank
        _insert_run(con, run)
        events = _event_rows(con, parsed, run)
        lines = IngestResult(run_name=run["name"], run_id=run_id)
        derive_trace(con, parsed, run_id, lines)  # threads, steps, the traces row, as ingest does
        staging = lake.stage_tables(con, root, lake.INGEST_TABLES, run["name"], run_id, rank, given={"events": events})
        lake.drop_partitions(root, lake.ANALYSIS_TABLES + lake.CROSS_RANK_TABLES, run["name"], rank)
        lake.publish_staged(staging, root, lake.INGEST_TABLES, run["name"], rank)
    except CtdaError as exc:
        return TaskFailure(str(exc))
    finally:
        con.close()
        discard_spilled(spilled)
    return {"rank": rank, "loaded": lines.loaded[0], "warnings": lines.warnings}


def _event_rows(con, parsed, run: dict):
    """The trace's events rows (sql/ingest/event_rows.sql, as ingest inserts them), sorted as
    their partition is, without `rank`; the warehouse's `events` gets the columns that
    deriving threads and steps reads (sql/lake/derive_events.sql). Sorted in Arrow, not by
    inserting every row and reading them back sorted, which costs more."""
    import pyarrow.compute as pc  # here, not in the client, which imports this module too

    from ctda_sql.ingest.load import event_rows_params, event_rows_sql, with_file_columns

    typed_events = with_file_columns(parsed, parsed.map_events())  # read by the SQL
    columns = [c for c in lake.stored_columns(con, ("events",))["events"] if c != "rank"]
    rows = con.sql(f"SELECT {', '.join(columns)}, rank FROM ({event_rows_sql()})",
                   params=event_rows_params(con, run["run_id"]))
    # sorted by Arrow: the sort keys' indices, then one take of the wide rows (cheaper than
    # DuckDB's ORDER BY of the wide rows); NULL times last (Arrow's default), as DuckDB sorts
    # them
    unsorted = rows.to_arrow_table()
    order = pc.sort_indices(unsorted, sort_keys=[(key, "ascending") for key in lake.SORT_KEYS["events"]])
    event_rows = unsorted.take(order)
    # the mapping goes: the parsed trace stays in the worker's memory (the parse task's
    # result) until the batch is written
    del typed_events, rows, unsorted, order
    parsed.release_events()
    con.register("event_rows", event_rows)  # the stage's registered table (its contract says so)
    try:
        stages.run_stage(con, "lake/derive_events.sql", {}, "lake stage")
    finally:
        con.unregister("event_rows")
    return event_rows.drop_columns(["rank"])


# ---- analyze ---------------------------------------------------------------------------------

# Event columns the engine (sql/analysis, sql/crossrank) never reads: an analyze task leaves
# them in their files, which saves much of the time to load a rank's events
# (tests/lake/test_lake.py::test_the_engine_reads_no_event_column_the_lake_leaves_out).
ENGINE_UNREAD_EVENT_COLUMNS = ("extra", "ts_raw")


def load_partitions(con, root: Path, run: dict, ranks: list[int], table: str, unread: tuple[str, ...] = (),
                    methods: list[str] | None = None) -> None:
    """The partitions of `table` of the run's `ranks` into the warehouse table of `con`, in
    one statement (DuckDB reads the files in parallel; each row's rank is its partition
    folder's name), without the cross-rank path's own files and the `unread` columns; only the
    rows of `methods` when given. DuckDB reads the Parquet itself: ~35% faster than through pyarrow tables on a
    480k-event rank. Rows stay in the files' order: no statement of the engine reads them in
    table order, and sorting a rank's events back into file order would be a third of its load."""
    files = [duckdb_path(f) for rank in ranks for f in lake.partition_files(root, table, run["name"], rank)
             if f.name != lake.CROSS_RANK_FILE]
    if not files:
        return
    where, params = "", {"files": files}
    if methods is not None:
        where, params = " WHERE list_contains($methods, method)", {**params, "methods": methods}
    con.execute(f'INSERT INTO "{table}" BY NAME SELECT * EXCLUDE ({", ".join(("filename", *unread))}), '
                "CAST(regexp_extract(filename, '/rank=(-?[0-9]+)/[^/]*$', 1) AS INTEGER) AS rank "
                "FROM read_parquet($files, union_by_name = true, hive_partitioning = false, filename = true)"
                f"{where}", params)


def analyze_rank(lake_dir: str, run: dict, rank: int, methods: list[str], window: str | None,
                 settings: dict, threads: int, cross_rank: bool = False) -> dict | TaskFailure:
    """The analysis engine (analyze.run_stages, as analyze runs it) on one rank's partitions; publishes
    the rank's analysis partitions (earlier results of other methods kept, as analyze does).
    With `cross_rank`, the result holds the rank's events that the run's cross-rank task
    reads (sql/lake/cross_rank_events.sql), as an Arrow table."""
    from ctda_sql.core.transaction import transaction
    from ctda_sql.engine.analyze import METHODS, AnalysisSettings, run_stages
    from ctda_sql.engine.crossrank import per_rank_methods

    root = Path(lake_dir)
    con = _warehouse(threads, "analysis", "crossrank", "lake")
    try:
        _insert_run(con, run)
        # not the cross-rank tables, files and rows (those in the per-rank files of a lake
        # written before the cross-rank path had files of its own): the per-rank engine neither
        # reads nor rewrites them, and publishing carries the cross-rank path's files over
        for table in lake.INGEST_TABLES + lake.ANALYSIS_TABLES:
            unread = ENGINE_UNREAD_EVENT_COLUMNS if table == "events" else ()
            load_partitions(con, root, run, [rank], table, unread,
                            per_rank_methods(list(METHODS)) if table in lake.CROSS_RANK_PATH_TABLES else None)
        with transaction(con):  # all of the rank's methods in one pass of the engine, as on a database
            counts = run_stages(con, run["run_id"], methods, window, settings=AnalysisSettings(**settings))
        comm_events = con.sql(sqlfiles.load("lake/cross_rank_events.sql")).to_arrow_table() if cross_rank else None
        # the cross-rank path was built on the rank's windows: it goes when they changed (as
        # its rows on changed windows go in a database, sql/analysis/70_persist.sql)
        windows_changed = con.execute("SELECT count(*) FROM cp_changed_windows").fetchone()[0] > 0
        staging = lake.stage_tables(con, root, lake.ANALYSIS_TABLES, run["name"], run["run_id"], rank)
        if not windows_changed:
            lake.carry_cross_rank_files(staging, root, run["name"], rank)
        lake.publish_staged(staging, root, lake.ANALYSIS_TABLES, run["name"], rank)
    except (CtdaError, duckdb.Error) as exc:  # duckdb: a partition file that cannot be read
        return TaskFailure(f"run {run['name']} rank {rank}: {str(exc).strip().splitlines()[0]}")
    finally:
        con.close()
    return {"rank": rank, "counts": counts, "cross_rank_events": comm_events}


def summary_counts(result: dict | TaskFailure) -> dict | TaskFailure:
    """The summary figures of an analyze_rank result (or its failure): what the client reads
    of it, without the events it hands the run's cross-rank task."""
    return result if isinstance(result, TaskFailure) else result["counts"]


def _stage_ranks(con, root: Path, run: dict, ranks: list[int], threads: int) -> list[tuple[int, Path, Path]]:
    """Stage each rank's cross-rank tables and path files, `threads` ranks at a time, each on
    its own cursor: pyarrow writes a Parquet file on one thread with the GIL released."""
    from concurrent.futures import ThreadPoolExecutor

    def stage(rank: int) -> tuple[int, Path, Path]:
        cursor = con.cursor()
        try:
            tables = lake.stage_tables(cursor, root, CROSS_RANK_OUTPUTS, run["name"], run["run_id"], rank)
            return rank, tables, lake.stage_cross_rank_paths(cursor, root, run["run_id"], rank)
        finally:
            cursor.close()

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        return list(pool.map(stage, ranks))


# What the cross-rank stages read (sql/crossrank: besides runs and the events that
# sql/lake/cross_rank_events.sql loads): the per-rank ctda path is all they read of the paths.
CROSS_RANK_INPUTS = ("steps", "traces", "analysis_windows")
# What they write besides the cross-rank path's files (lake.stage_cross_rank_paths):
# traces for the clock offsets.
CROSS_RANK_OUTPUTS = lake.CROSS_RANK_TABLES + ("traces",)


def cross_rank_run(lake_dir: str, run: dict, ranks: list[int], threads: int,
                   rank_results: list[dict | TaskFailure]) -> dict | TaskFailure:
    """The cross-rank stages of one run (crossrank.analyze_cross_rank, unchanged) over its
    ranks' partitions and the events its ranks' analyze tasks handed over (`rank_results`),
    once analyze_rank has written every rank's ctda path: the per-rank engine runs in
    parallel and only the matching and the joined path wait for all ranks. Publishes each
    rank's cross-rank partitions, traces (clock offsets) and the cross-rank path's files
    beside the per-rank paths."""
    from ctda_sql.core.transaction import transaction
    from ctda_sql.engine.crossrank import METHOD, analyze_cross_rank

    root = Path(lake_dir)
    con = _warehouse(threads, "crossrank", "lake")
    try:
        _insert_run(con, run)
        for table in CROSS_RANK_INPUTS:
            load_partitions(con, root, run, ranks, table)
        for table in lake.CROSS_RANK_PATH_TABLES:
            load_partitions(con, root, run, ranks, table, methods=["ctda"])
        for result in rank_results:
            if isinstance(result, TaskFailure):
                return result
            comm_events = result["cross_rank_events"]  # noqa: F841 (read by the SQL)
            con.execute("INSERT INTO events BY NAME SELECT * FROM comm_events")
        with transaction(con):
            summary = analyze_cross_rank(con, run["run_id"], [METHOD])
        for rank, tables, paths in _stage_ranks(con, root, run, ranks, threads):
            lake.publish_staged(tables, root, CROSS_RANK_OUTPUTS, run["name"], rank)
            lake.publish_cross_rank_paths(paths, root, run["name"], rank)
    except (CtdaError, duckdb.Error) as exc:
        return TaskFailure(f"run {run['name']}: {str(exc).strip().splitlines()[0]}")
    finally:
        con.close()
    return {"run": run["name"], "lines": run_summary_lines(summary, run["name"])}


def run_summary_lines(summary: str, run: str) -> list[str]:
    """analyze_cross_rank's summary of one run, its `cross_rank:` line naming the run (the
    lake prints one per run) and its notes kept."""
    lines = [line.strip() for line in summary.splitlines() if line.strip()]
    return [line.replace("cross_rank: ", f"cross_rank: run {run!r}: ", 1) if line.startswith("cross_rank: ")
            else line for line in lines]
