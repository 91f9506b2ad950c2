"""Load trace files into the warehouse as one run, atomically.

Each file is parsed and validated once (in a process pool when there are several): a worker
types its events with DuckDB's JSON reader into an Arrow table (traceio.py), and the main
process only inserts those columns. Everything for the batch is written inside one
transaction: a bad file or Ctrl-C leaves the database exactly as it was.
"""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path

import duckdb
import pyarrow as pa

from ctda_sql.core import sqlfiles, stages
from ctda_sql.core.errors import BadTraceError, CtdaError
from ctda_sql.core.progress import progress_bar, stage_bar
from ctda_sql.core.transaction import transaction
from ctda_sql.ingest.experiments import check_meta_keys, refresh_run_meta
from ctda_sql.ingest.traceio import (
    DUCKDB_ROW_GROUP_ROWS,
    ParsedTrace,
    check_regular_file,
    in_row_group_batches,
    is_trace_file,
    parse_folder,
    read_trace,
    remove_abandoned_parse_folders,
)

# Above this many input bytes a single file also gets a progress bar.
_LARGE_INPUT_BYTES = 20_000_000
# Below this much JSON, starting worker processes (~0.15 s) costs more than it saves.
_POOL_MIN_JSON_BYTES = 40_000_000


@dataclass
class IngestResult:
    run_name: str
    run_id: int
    loaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # oddities every real Kineto trace has: shown only when asked for (ingest --verbose)
    notes: list[str] = field(default_factory=list)


def collect_files(paths: list[str | Path]) -> list[Path]:
    """Trace files named directly, plus the trace files inside named folders."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if is_trace_file(p))
            if not found:
                raise CtdaError(f"{path}: folder has no trace files (*.json, *.json.gz)")
            files.extend(found)
        elif path.exists():
            check_regular_file(path)
            files.append(path)
        else:
            raise BadTraceError(path, "no such file or folder")
    return files


def default_run_name(paths: list[str | Path]) -> str:
    """The folder name for a folder, the file name without trace suffixes for a file."""
    first = Path(paths[0])
    if first.is_dir():
        return first.resolve().name
    name = first.name
    for suffix in (".gz", ".json", ".trace", ".pt"):
        name = name.removesuffix(suffix)
    return name


def parse_files(files: list[Path], show_progress: bool = True, spill_folder: Path | None = None) -> list[ParsedTrace]:
    """Parse every file, in parallel across cores when there are several. With a pool, each
    worker spills its file's events into spill_folder and the insert maps them back one file
    at a time (ParsedTrace.spill_events): no table is pickled, and none waits in memory."""
    remove_abandoned_parse_folders()
    total_bytes = sum(f.stat().st_size for f in files)
    visible = show_progress and (len(files) > 1 or total_bytes > _LARGE_INPUT_BYTES)
    cores = os.cpu_count() or 1
    workers = min(len(files), cores)
    with progress_bar("parsing", len(files), visible and len(files) > 1) as advance:
        if workers <= 1 or spill_folder is None or _json_bytes_estimate(files) < _POOL_MIN_JSON_BYTES:
            # a lone file shows its stages instead, once it takes more than about a second
            return [_parse_one(f, advance, show_progress and len(files) == 1) for f in files]
        # each worker's DuckDB gets its share of the cores, not all of them
        threads = max(1, cores // workers)
        spill_files = [spill_folder / f"events-{index}.arrow" for index in range(len(files))]
        with ProcessPoolExecutor(max_workers=workers, initializer=_ignore_ctrl_c) as pool:
            parsed = []
            for trace in pool.map(_read_and_spill, files, [threads] * len(files), spill_files):
                parsed.append(trace)
                advance()
            return parsed


def _read_and_spill(path: Path, threads: int, events_file: Path) -> ParsedTrace:
    trace = read_trace(path, threads)
    trace.spill_events(events_file)
    return trace


def _ignore_ctrl_c() -> None:
    """Workers leave Ctrl-C to the main process, which rolls back and prints one line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _json_bytes_estimate(files: list[Path]) -> int:
    # Kineto JSON gzips about 10-15x; only the order of magnitude matters here
    return sum(f.stat().st_size * (12 if f.name.endswith(".gz") else 1) for f in files)


def _parse_one(path: Path, advance, show_stages: bool = False) -> ParsedTrace:
    with stage_bar(path.name, show_stages) as stage:
        trace = read_trace(path, on_stage=stage)
    advance()
    return trace


def ingest(
    con: duckdb.DuckDBPyConnection,
    paths: list[str | Path],
    run_name: str | None = None,
    meta: dict | None = None,
    replace: bool = False,
    show_progress: bool = True,
) -> IngestResult:
    """Ingest `paths` as one run; all or nothing."""
    files = collect_files(paths)
    with parse_folder() as spill_folder:  # removed with the events spilled into it
        parsed = parse_files(files, show_progress, Path(spill_folder))
        _check_batch(parsed)
        name = run_name or default_run_name(paths)
        with transaction(con):
            check_meta_keys(con, meta or {})
            result = _load_batch(con, parsed, name, meta or {}, replace, show_progress)
            refresh_run_meta(con)  # new --meta keys become run_meta columns
    return result


def _check_batch(parsed: list[ParsedTrace]) -> None:
    seen: dict[int, Path] = {}
    for trace in parsed:
        if trace.rank in seen:
            raise CtdaError(
                f"{seen[trace.rank]} and {trace.path} are both rank {trace.rank}; "
                "ingest them as separate runs (--run NAME)"
            )
        seen[trace.rank] = trace.path


def _load_batch(con, parsed, name, meta, replace, show_progress) -> IngestResult:
    run_id = _get_or_create_run(con, name, meta, parsed)
    result = IngestResult(run_name=name, run_id=run_id)
    to_load = [trace for trace in parsed if _make_room_or_skip(con, trace, run_id, replace, result)]
    visible = show_progress and len(parsed) > 1
    lone = to_load[0] if len(parsed) == 1 and to_load else None  # shows its stage, as its parse did
    with progress_bar("loading", len(to_load), visible) as advance, \
            stage_bar(lone.path.name if lone else "", show_progress and lone is not None) as stage:
        stage("loading into the warehouse", lone.file_bytes if lone else 0)
        insert_events(con, to_load, run_id)
        for trace in to_load:
            derive_trace(con, trace, run_id, result)
            advance()
    # leave no empty run behind: a new one whose files were all skipped, or one whose last
    # file --replace moved into this run
    con.execute("DELETE FROM runs WHERE run_id NOT IN (SELECT run_id FROM traces)")
    return result


def _make_room_or_skip(con, trace: ParsedTrace, run_id: int, replace: bool, result) -> bool:
    """False (with a message) for a file already ingested; else clear what it replaces."""
    existing = con.execute(
        "SELECT r.name, t.rank, t.run_id FROM traces t JOIN runs r USING (run_id) "
        "WHERE t.file_sha256 = ?", [trace.sha256]
    ).fetchall()
    if existing and not replace:
        result.skipped.append(
            f"{trace.path}: already ingested as run {existing[0][0]} rank {existing[0][1]}; "
            "skipped (use --replace to load it again)"
        )
        return False
    if existing:
        delete_trace(con, existing[0][2], existing[0][1])
    _make_room_for_rank(con, trace, run_id, replace)
    return True


def derive_trace(con, trace: ParsedTrace, run_id: int, result: IngestResult) -> None:
    """After the trace's events are in: its threads, steps and traces row, and its lines
    (loaded, odd-field warnings) in `result`. The lake's ingest tasks call it too."""
    stages.run_stages(con, "ingest", ("threads.sql", "steps.sql"), {"run_id": run_id, "rank": trace.rank},
                      "ingest stage")
    _insert_trace_row(con, trace, run_id)
    result.loaded.append(_loaded_line(con, trace, run_id))
    result.warnings.extend(_odd_field_warnings(trace))
    result.notes.extend(_odd_field_warnings(trace, routine=True))


def _make_room_for_rank(con, trace: ParsedTrace, run_id: int, replace: bool) -> None:
    holder = con.execute(
        "SELECT source_path FROM traces WHERE run_id = ? AND rank = ?", [run_id, trace.rank]
    ).fetchone()
    if holder is None:
        return
    if not replace:
        raise CtdaError(
            f"{trace.path}: the run already has rank {trace.rank} (from {holder[0]}); "
            "use --replace to overwrite it or --run NAME for a new run"
        )
    delete_trace(con, run_id, trace.rank)


# Tables holding per-trace rows; analysis tables are added by the engine's schema.
_PER_TRACE_TABLES = ("events", "steps", "threads", "traces")


def delete_trace(con, run_id: int, rank: int) -> None:
    """Remove one trace and everything derived from it."""
    tables = _PER_TRACE_TABLES + _analysis_tables(con)
    for table in tables:
        con.execute(f"DELETE FROM {table} WHERE run_id = ? AND rank = ?", [run_id, rank])


def _analysis_tables(con) -> tuple[str, ...]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_columns() WHERE column_name = 'rank' "
        "AND table_name NOT IN ('events', 'steps', 'threads', 'traces') "
        "AND NOT internal AND database_name = current_database() AND schema_name = 'main' "
        "AND table_name IN (SELECT table_name FROM duckdb_tables())"
    ).fetchall()
    return tuple(sorted({row[0] for row in rows}))


def _get_or_create_run(con, name: str, meta: dict, parsed: list[ParsedTrace]) -> int:
    row = con.execute("SELECT run_id, meta FROM runs WHERE name = ?", [name]).fetchone()
    if row:
        merged = {**json.loads(row[1]), **meta}
        con.execute("UPDATE runs SET meta = ? WHERE run_id = ?", [json.dumps(merged), row[0]])
        return row[0]
    run_id = con.execute("SELECT nextval('run_id_seq')").fetchone()[0]
    con.execute(
        "INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
        [run_id, name, _now(), json.dumps(meta), _run_origin(parsed)],
    )
    return run_id


def _run_origin(parsed: list[ParsedTrace]) -> Decimal:
    """Whole epoch microsecond at or before the earliest event of the batch."""
    starts = [t.min_ts * t.ts_scale + t.ts_offset_us for t in parsed if t.min_ts is not None]
    return min(starts).to_integral_value(ROUND_FLOOR) if starts else Decimal(0)


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def insert_events(con, traces: list[ParsedTrace], run_id: int) -> None:
    """Each file's events inserted as the batch goes, on every thread and in file order, each
    file's events released once in (one file's events in memory at a time, not the batch's).

    Every row group but the batch's last is full: DuckDB's order-keeping parallel insert
    writes each Arrow batch of DUCKDB_ROW_GROUP_ROWS rows as a row group of its own, so each
    statement inserts whole row groups only, and the rows left over at a file's end wait in a
    copy to lead the next file's statement (the batch's last statement inserts what is left).
    A part-filled row group per file or per thread would be rewritten by the next
    checkpoint's vacuum, leaving free blocks: ~40% of a 16-rank database with one per thread."""
    if not traces:
        return
    params = event_rows_params(con, run_id)
    if not _external_access(con):
        # a --safe session resolves no Python names: each file is one insert through a view
        # (correct; its row groups only less full)
        for trace in traces:
            _insert_registered(con, with_file_columns(trace, trace.map_events()), params)
            trace.release_events()
        return
    left_over = None
    for trace in traces:
        left_over = _insert_whole_row_groups(con, trace, left_over, params)
        trace.release_events()
    if left_over is not None and left_over.num_rows:
        _insert_rows(con, left_over, params)


def _insert_whole_row_groups(con, trace: ParsedTrace, left_over: pa.Table | None, params: dict) -> pa.Table:
    """Insert the previous file's left-over rows and this file's rows up to the last whole row
    group; returns the rows after it, copied so that the file's mapping can go."""
    rows = with_file_columns(trace, trace.map_events())
    if left_over is not None and left_over.num_rows:
        rows = pa.concat_tables([left_over, rows])
    whole = rows.num_rows - rows.num_rows % DUCKDB_ROW_GROUP_ROWS
    if whole:
        # no copy when nothing was left over: the worker's batches already are row groups
        _insert_rows(con, in_row_group_batches(rows.slice(0, whole)), params)
    return _copied(rows.slice(whole))  # slices share the mapping's buffers


def _copied(table: pa.Table) -> pa.Table:
    """`table` in buffers of its own, through an in-memory IPC stream: `take` would copy too,
    but importing pyarrow.compute for it would slow every ingest command."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return pa.ipc.open_stream(sink.getvalue()).read_all()


def with_file_columns(trace: ParsedTrace, events: pa.Table) -> pa.Table:
    """The file's typed events with its rank, time scale and offset as columns, so that one
    statement can insert rows of two files."""
    rows = events.num_rows
    return (events
            .append_column("rank", pa.repeat(pa.scalar(int(trace.rank), pa.int64()), rows))
            .append_column("ts_scale", pa.repeat(pa.scalar(Decimal(trace.ts_scale), _DECIMAL), rows))
            .append_column("ts_offset_us", pa.repeat(pa.scalar(Decimal(trace.ts_offset_us), _DECIMAL), rows)))


_DECIMAL = pa.decimal128(38, 6)


def _insert_rows(con, rows: pa.Table, params: dict) -> None:
    # DuckDB finds the table by this local name (a replacement scan) for this statement only;
    # a registered view would hold it until the transaction ends, keeping every file's
    # events mapped in memory until the whole batch is in
    typed_events = rows  # noqa: F841 (read by the SQL)
    con.execute(_events_sql(), params)


def _insert_registered(con, rows: pa.Table, params: dict) -> None:
    con.register("typed_events", rows)
    try:
        con.execute(_events_sql(), params)
    finally:
        with suppress(duckdb.Error):  # refused in an aborted transaction; its cause goes on
            con.unregister("typed_events")


def event_rows_sql() -> str:
    """sql/ingest/event_rows.sql, the SELECT of the events rows from `typed_events` (rows of
    with_file_columns), without its closing ';' so that a statement can hold it."""
    return sqlfiles.load("ingest/event_rows.sql").rstrip().removesuffix(";")


def event_rows_params(con, run_id: int) -> dict:
    """event_rows_sql's parameters for a run: the origin as the runs table holds it (its
    DECIMAL(38, 6) decides the exact type of each ts_us computation)."""
    origin = con.execute("SELECT origin_ts FROM runs WHERE run_id = ?", [run_id]).fetchall()[0][0]
    return {"run_id": run_id, "origin_ts": origin}


def _events_sql() -> str:
    """The insert of event_rows_sql. BY NAME: the generated end_us is not one of the rows'
    columns."""
    return "INSERT INTO events BY NAME\n" + event_rows_sql()


def _external_access(con) -> bool:
    """Whether the session resolves Python names in SQL (a --safe one, without external
    access, does not)."""
    return bool(con.execute("SELECT current_setting('enable_external_access')").fetchall()[0][0])


def _insert_trace_row(con, trace: ParsedTrace, run_id: int) -> None:
    meta = dict(trace.meta)
    info = meta.pop("distributedInfo", None)
    devices = meta.pop("deviceProperties", None)
    schema_version = meta.pop("schemaVersion", None)
    trace_name = meta.pop("traceName", None)
    world_size = info.get("world_size") if isinstance(info, dict) else None
    con.execute(sqlfiles.load("ingest/trace_row.sql"), [
        run_id, trace.rank, str(trace.path.resolve()), trace.sha256, trace.file_bytes,
        world_size, trace.event_count, trace.rank_source, trace.time_resolution,
        trace.ts_offset_us, None if schema_version is None else str(schema_version),
        trace_name, _json_or_null(info), _json_or_null(devices), json.dumps(meta), _now(),
    ])


def _json_or_null(value) -> str | None:
    return None if value is None else json.dumps(value)


def _loaded_line(con, trace: ParsedTrace, run_id: int) -> str:
    steps = con.execute(
        "SELECT count(*) FILTER (WHERE NOT whole_trace) FROM steps WHERE run_id = ? AND rank = ?",
        [run_id, trace.rank],
    ).fetchone()[0]
    step_text = f"{steps} steps" if steps else "no ProfilerStep annotations (one whole-trace step)"
    return (
        f"{trace.path.name}: rank {trace.rank} (from {trace.rank_source}), "
        f"{trace.event_count:,} events, {step_text}, {trace.time_resolution} timestamps"
    )


# Kineto itself writes these in every real trace (string lanes for its own rows, flow ends
# whose start fell before the profiled window): notes for --verbose, not warnings
_ROUTINE_ODDITIES = ("string pid/tid lanes", "flow ends without a start")


def _odd_field_warnings(trace: ParsedTrace, routine: bool = False) -> list[str]:
    counts = trace.odd_field_counts
    labels = ("complete events without dur", "string pid/tid lanes", "events without cat",
              "flow ends without a start", "events with extra keys beyond the Kineto ones")
    odd = [f"{n:,} {label}" for n, label in zip(counts, labels) if n and (label in _ROUTINE_ODDITIES) == routine]
    if not odd:
        return []
    return [f"{trace.path.name}: kept events with odd but recoverable fields: " + "; ".join(odd)]
