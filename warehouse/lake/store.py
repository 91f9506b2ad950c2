"""The lake: the warehouse's tables as Hive-partitioned Parquet under one folder.

    LAKE/runs.parquet                                   one file, rewritten atomically
    LAKE/traces/run=NAME/rank=N/part-0.parquet          likewise events, steps, threads,
    LAKE/events/run=NAME/rank=N/part-0.parquet          analysis_windows, nodes, edges,
    ...                                                 critical_path, path_events,
                                                        collective_instances, cross_rank_segments
    LAKE/critical_path/run=NAME/rank=N/cross_rank.parquet   the cross-rank path's rows (likewise
                                                            path_events), beside part-0.parquet

A partition's files hold every column of the DuckDB table but `rank` (the folder names it);
they are zstd-compressed, sorted by time within the partition, in row groups small enough that
DuckDB skips those outside a time filter. Queries open an in-memory DuckDB with the usual
schema, macros and UDFs, whose tables are replaced by views over the lake (`open_lake` in warehouse/lake/views.py), so
saved reports run unchanged; a filter on run name or rank prunes whole partitions.

A partition is written into LAKE/_tmp and renamed into place: a failed or interrupted task
leaves no half partition. An ingest writes `traces` last, so a rank is ingested exactly when
its traces partition exists (re-running skips such files by sha256).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ctda_sql.core.errors import CtdaError
from ctda_sql.core.quoting import quote_identifier

RUNS_FILE = "runs.parquet"
TMP = "_tmp"
INGEST_TABLES = ("events", "steps", "threads", "traces")  # traces last: it marks a rank done
ANALYSIS_TABLES = ("analysis_windows", "nodes", "edges", "critical_path", "path_events")
# written by the one task per run that builds the cross-rank path (it needs every rank)
CROSS_RANK_TABLES = ("collective_instances", "cross_rank_segments")
PARTITIONED = INGEST_TABLES + ANALYSIS_TABLES + CROSS_RANK_TABLES
# critical_path and path_events hold the per-rank methods' rows in part-0.parquet and the
# cross-rank path's in cross_rank.parquet beside it: the run's cross-rank task writes only its
# own rows (rewriting every rank's whole partitions would be much of that task), and a rank's
# analyze task carries the file over when it replaces the partition.
PART_FILE = "part-0.parquet"
CROSS_RANK_FILE = "cross_rank.parquet"
CROSS_RANK_PATH_TABLES = ("critical_path", "path_events")
# row order within a partition: time first, so each row group covers a short time span
SORT_KEYS = {
    "events": ("ts_us", "event_id"),
    "steps": ("start_us", "step"),
    "threads": ("pid", "tid"),
    "traces": (),
    "analysis_windows": ("step",),
    "nodes": ("method", "step", "start_us", "node_id"),
    "edges": ("method", "step", "src", "dst"),
    "critical_path": ("method", "step", "seq"),
    "path_events": ("method", "step", "node_id", "event_id"),
    "collective_instances": ("start_us", "pg", "seq"),
    "cross_rank_segments": ("step", "hop"),
}
ROW_GROUP_ROWS = 65_536
ZSTD_LEVEL = 9
# zstd levels other than ZSTD_LEVEL (docs/scale-out.md, docs/decisions/0010): level 1 where
# level 9 saves under 5% of the column's bytes for twice the time or more; level 3 for the
# time columns, and level 1 for args written plain: the costliest columns to squeeze. A rank's
# events partition is a few percent larger for about half the encoding time.
_ZSTD_LEVELS = {"run_id": 1, "dur_us": 1, "correlation": 1, "cat": 1, "ph": 1, "pid": 1, "tid": 1,
                "stream": 1, "args": 1, "ts_us": 3, "ts_raw": 3}
# Encodings that differ in partitions of more than one row group, for the levels above: ts_raw,
# sorted by time, shares its leading bytes with the row before (delta at level 3 is a tenth
# larger than plain at level 9, in a fifth of the time); args at level 1 do better plain.
_MANY_ROW_GROUP_ENCODINGS = {"ts_raw": "DELTA_BYTE_ARRAY", "args": "PLAIN"}
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
RANK_PARTITION = re.compile(r"rank=(-?\d+)")


# ---- layout --------------------------------------------------------------------------------

def check_run_name(name: str) -> str:
    """Run names become folder names (run=NAME): letters, digits and . _ + - only."""
    if not _RUN_NAME.fullmatch(name):
        raise CtdaError(f"run name {name!r} cannot name a lake partition; use letters, digits "
                        "and . _ + - (--run NAME)")
    return name


# DuckDB's hive partitioning reads key=value from every folder of a file's path and keeps the
# first: a lake under a folder named rank=9 would read every file as rank 9.
_PARTITION_KEYS = ("run", "rank")


def lake_path(value: str | Path, must_exist: bool = False) -> Path:
    path = Path(value).expanduser().resolve()
    if "'" in str(path) or any(ord(c) < 32 for c in str(path)):
        raise CtdaError(f"lake folder {value!r}: quotes and control characters are not allowed in its path")
    for part in path.parts:
        key, equals, _ = part.partition("=")
        if equals and key.lower() in _PARTITION_KEYS:
            raise CtdaError(f"lake folder {value}: the folder {part!r} in its path would be read as the lake's "
                            "own run or rank partition; put the lake under a folder without run= or rank=")
    if path.exists() and not path.is_dir():
        raise CtdaError(f"lake {value}: not a folder")
    if must_exist and not (path / RUNS_FILE).exists():
        if held_run_names(path):
            raise CtdaError(lost_runs_message(path))
        raise CtdaError(f"no lake at {value}; run `ctda-sql ingest --lake {value} PATH` first")
    return path


def held_run_names(lake: Path) -> list[str]:
    """The runs that have partitions in the lake, whatever runs.parquet says."""
    names = set()
    for table in PARTITIONED:
        folder = lake / table
        if folder.is_dir():
            names |= {p.name.removeprefix("run=") for p in folder.iterdir() if p.name.startswith("run=")}
    return sorted(names)


def lost_runs_message(lake: Path) -> str:
    """runs.parquet gone from a lake that holds runs: a new run would take an id already used
    and be read together with an old one, so the lake is refused."""
    names = held_run_names(lake)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (f"lake {lake}: {RUNS_FILE} is missing but the lake holds partitions of run(s) {shown}; "
            f"restore {RUNS_FILE} from a copy, or ingest the traces into a new lake")


def partition_dir(lake: Path, table: str, run: str, rank: int) -> Path:
    return lake / table / f"run={run}" / f"rank={int(rank)}"


def ranks_of(lake: Path, table: str, run: str) -> list[int]:
    folder = lake / table / f"run={run}"
    if not folder.is_dir():
        return []
    found = (RANK_PARTITION.fullmatch(p.name) for p in folder.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


# The lake's manifest: the only file names a table's partition holds as data. Any other file
# (a copy of another rank's file beside part-0.parquet, a backup) is no data: readers and
# analyze skip it and the integrity check names it (warehouse/lake/integrity.py).
DATA_FILES = {table: (PART_FILE, CROSS_RANK_FILE) if table in CROSS_RANK_PATH_TABLES else (PART_FILE,)
              for table in PARTITIONED}


def partition_files(lake: Path, table: str, run: str, rank: int) -> list[Path]:
    """The (run, rank) partition's data files: those DATA_FILES names that are there."""
    folder = partition_dir(lake, table, run, rank)
    return [folder / name for name in DATA_FILES[table] if (folder / name).is_file()]


def ingested_ranks(lake: Path, run: str) -> list[int]:
    """The run's ranks whose traces partition holds its file: an ingest publishes traces last,
    so exactly these ranks are in the lake (the other tables' partitions of any other rank are
    left over from a rank whose traces were lost, and are not read)."""
    return [rank for rank in ranks_of(lake, "traces", run) if partition_files(lake, "traces", run, rank)]


def new_staging_dir(lake: Path) -> Path:
    path = lake / TMP / uuid.uuid4().hex
    path.mkdir(parents=True)
    return path


WRITER_LOCK = ".writer.lock"


@contextmanager
def sole_writer(lake: Path) -> Iterator[None]:
    """Hold the lake's writer lock while the block runs: a second ingest or analyze on the same
    lake would publish partitions under the first one and remove its staging files."""
    import fcntl

    with open(lake / WRITER_LOCK, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CtdaError(f"{lake}: another ingest or analyze is writing this lake; "
                            "run this when it has finished") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_stale_staging(lake: Path) -> None:
    """Staging folders left by killed tasks (called by the client before new work starts)."""
    staging = lake / TMP
    if staging.is_symlink() or (staging.exists() and not staging.is_dir()):
        staging.unlink()  # not a folder of ours: a stray file of that name would stop every task
    shutil.rmtree(staging, ignore_errors=True)


def publish(staged: Path, target: Path) -> None:
    """Move a staged partition folder into place, replacing the one there (rename, not copy)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        old = staged.parent / f"{staged.name}.old"
        os.rename(target, old)
        os.rename(staged, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(staged, target)


def drop_partitions(lake: Path, tables: tuple[str, ...], run: str, rank: int) -> None:
    for table in tables:
        folder = partition_dir(lake, table, run, rank)
        if folder.exists():
            trash = lake / TMP / f"drop-{uuid.uuid4().hex}"
            trash.parent.mkdir(parents=True, exist_ok=True)
            os.rename(folder, trash)
            shutil.rmtree(trash, ignore_errors=True)


# ---- writing -------------------------------------------------------------------------------

def stored_columns(con: duckdb.DuckDBPyConnection, tables: tuple[str, ...]) -> dict[str, list[str]]:
    """Each table's stored columns (not generated ones), in schema order: one catalog query
    for all of them (~7 ms each; a run's cross-rank task stages 6 tables for every rank)."""
    rows = con.execute(
        "SELECT table_name, list(column_name ORDER BY ordinal_position) FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name IN (SELECT unnest(?)) AND is_generated = 'NEVER' "
        "GROUP BY table_name", [list(tables)]).fetchall()
    return dict(rows)


def table_rows(con: duckdb.DuckDBPyConnection, table: str, columns: list[str], run_id: int, rank: int,
               method: str | None = None) -> pa.Table:
    """One (run, rank)'s rows of `table`'s stored `columns` without the rank column, sorted by
    SORT_KEYS; only those of `method` when given."""
    columns = [c for c in columns if c != "rank"]
    order = ", ".join(quote_identifier(c) for c in SORT_KEYS[table]) or "1"
    where, params = "run_id = ? AND rank = ?", [run_id, rank]
    if method is not None:
        where, params = f"{where} AND method = ?", [*params, method]
    sql = (f"SELECT {', '.join(quote_identifier(c) for c in columns)} FROM {quote_identifier(table)} "
           f"WHERE {where} ORDER BY {order}")
    return con.sql(sql, params=params).to_arrow_table()


# Encodings per column, measured on the shared nccl trace (docs/scale-out.md): ids that grow
# by small steps delta-encode to almost nothing; time points are all distinct, so a
# dictionary only adds bytes (likewise the exact decimal `ts_raw`); JSON strings share long
# prefixes. Every other column keeps a dictionary.
_DELTA_INTS = {"event_id", "correlation", "external_id", "node_id", "src", "dst", "seq", "event_count"}
_PLAIN = {"ts_us", "start_us", "end_us", "counted_start_us", "counted_end_us", "effective_end_us",
          "e2e_end_us", "sync_start_us", "sync_end_us", "wait_end_us"}
_DELTA_STRINGS = {"args", "extra"}


def column_encodings(schema: pa.Schema, many_row_groups: bool = False) -> dict[str, str]:
    encodings = {}
    for f in schema:
        if f.name in _DELTA_INTS and pa.types.is_integer(f.type):
            encodings[f.name] = "DELTA_BINARY_PACKED"
        elif f.name in _PLAIN:
            encodings[f.name] = "PLAIN"
        elif f.name in _DELTA_STRINGS and pa.types.is_string(f.type):
            encodings[f.name] = "DELTA_BYTE_ARRAY"
        elif pa.types.is_decimal(f.type):
            encodings[f.name] = "PLAIN"  # DuckDB reads no byte-stream-split decimals
    if many_row_groups:
        encodings.update({name: encoding for name, encoding in _MANY_ROW_GROUP_ENCODINGS.items()
                          if name in encodings})
    return encodings


# Below this many rows a dictionary page per column costs more bytes than it saves.
DICTIONARY_MIN_ROWS = 1_000


def statistics_columns(schema: pa.Schema) -> list[str]:
    """The columns whose min/max go into the footer: not strings. Rows are sorted by time, so
    only numbers (run_id, times, ids) prune row groups, and a string's min and max are the
    string itself: a trace's metadata JSON twice in its footer made `traces` 16 KB of the
    alexnet trace's 44 KB lake (3.4 KB without)."""
    return [f.name for f in schema if not (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))]


def compression_levels(rows: pa.Table) -> dict[str, int] | int:
    """zstd level per column: ZSTD_LEVEL but where _ZSTD_LEVELS measured cheaper, in files of
    more than one row group; a smaller file takes milliseconds at any level and keeps every
    byte level 9 saves (a small trace's lake is near 10% of it)."""
    if rows.num_rows <= ROW_GROUP_ROWS:
        return ZSTD_LEVEL
    return {name: _ZSTD_LEVELS.get(name, ZSTD_LEVEL) for name in rows.column_names}


def write_parquet(rows: pa.Table, path: Path) -> None:
    """zstd per compression_levels, row groups of ROW_GROUP_ROWS, statistics per
    statistics_columns, encodings per column_encodings, dictionaries only for
    DICTIONARY_MIN_ROWS rows or more."""
    encodings = column_encodings(rows.schema, many_row_groups=rows.num_rows > ROW_GROUP_ROWS)
    dictionary = [name for name in rows.column_names if name not in encodings]
    if rows.num_rows < DICTIONARY_MIN_ROWS:
        dictionary = False
    options = dict(compression="zstd", compression_level=compression_levels(rows),
                   row_group_size=ROW_GROUP_ROWS, write_statistics=statistics_columns(rows.schema),
                   store_schema=False)
    try:
        pq.write_table(rows, path, use_dictionary=dictionary, column_encoding=encodings, **options)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # an older pyarrow lacking one of them
        pq.write_table(rows, path, **options)


def stage_tables(con, lake: Path, tables: tuple[str, ...], run: str, run_id: int, rank: int,
                 given: dict[str, pa.Table] | None = None) -> Path:
    """Write the (run, rank) partitions of `tables` into one staging folder; returns it. A
    table in `given` is written from those rows (already as table_rows would make them), not
    read from `con`."""
    staging = new_staging_dir(lake)
    columns = stored_columns(con, tables)
    for table in tables:
        folder = staging / table
        folder.mkdir()
        rows = (given or {}).get(table)
        if rows is None:
            rows = table_rows(con, table, columns[table], run_id, rank)
        write_parquet(rows, folder / PART_FILE)
    return staging


def carry_cross_rank_files(staging: Path, lake: Path, run: str, rank: int) -> None:
    """Link the rank's cross-rank path files into its staged critical_path and path_events
    partitions, so that publishing them keeps the cross-rank path (as a database keeps the
    rows of methods it does not analyze)."""
    for table in CROSS_RANK_PATH_TABLES:
        held, staged = partition_dir(lake, table, run, rank) / CROSS_RANK_FILE, staging / table / CROSS_RANK_FILE
        if held.is_file() and staged.parent.is_dir():
            try:
                os.link(held, staged)
            except OSError:  # a file system without hard links
                shutil.copyfile(held, staged)


def publish_staged(staging: Path, lake: Path, tables: tuple[str, ...], run: str, rank: int) -> None:
    for table in tables:  # in the order given: traces last for an ingest
        publish(staging / table, partition_dir(lake, table, run, rank))
    shutil.rmtree(staging, ignore_errors=True)


def stage_cross_rank_paths(con, lake: Path, run_id: int, rank: int) -> Path:
    """The rank's cross-rank path rows (critical_path, path_events) as staged files; returns
    their folder."""
    staging = new_staging_dir(lake)
    columns = stored_columns(con, CROSS_RANK_PATH_TABLES)
    for table in CROSS_RANK_PATH_TABLES:
        rows = table_rows(con, table, columns[table], run_id, rank, method="cross_rank")
        write_parquet(rows, staging / f"{table}.parquet")
    return staging


def publish_cross_rank_paths(staging: Path, lake: Path, run: str, rank: int) -> None:
    """Move staged cross-rank path files into the rank's partitions, replacing those there (a
    file rename: atomic, the per-rank methods' files untouched)."""
    for table in CROSS_RANK_PATH_TABLES:
        folder = partition_dir(lake, table, run, rank)
        folder.mkdir(parents=True, exist_ok=True)
        os.replace(staging / f"{table}.parquet", folder / CROSS_RANK_FILE)
    shutil.rmtree(staging, ignore_errors=True)


# ---- runs ----------------------------------------------------------------------------------

_RUNS_SCHEMA = pa.schema([
    ("run_id", pa.int32()), ("name", pa.string()), ("ingested_at", pa.timestamp("us")),
    ("meta", pa.string()), ("origin_ts", pa.decimal128(38, 6)),
])


def read_runs(lake: Path) -> list[dict]:
    """The lake's runs; a CtdaError when runs.parquet is missing from a lake that holds runs,
    or cannot be read as the runs table."""
    path = lake / RUNS_FILE
    if not path.exists():
        if held_run_names(lake):
            raise CtdaError(lost_runs_message(lake))
        return []
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:  # a folder, an empty or garbage file
        raise CtdaError(f"lake {lake}: {RUNS_FILE} cannot be read ({_first(exc)}); restore it from a copy, "
                        "or ingest the traces into a new lake") from None
    missing = [f.name for f in _RUNS_SCHEMA if f.name not in table.column_names]
    if missing:
        raise CtdaError(f"lake {lake}: {RUNS_FILE} is not a runs table (no column {', '.join(missing)}); "
                        "restore it from a copy, or ingest the traces into a new lake")
    return table.select([f.name for f in _RUNS_SCHEMA]).to_pylist()


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def write_runs(lake: Path, runs: list[dict]) -> None:
    """Rewrite runs.parquet atomically (temporary name, then rename)."""
    lake.mkdir(parents=True, exist_ok=True)
    rows = sorted(runs, key=lambda r: r["run_id"])
    for row in rows:
        row["origin_ts"] = Decimal(row["origin_ts"])
    table = pa.Table.from_pylist(rows, schema=_RUNS_SCHEMA)
    _replace_runs_file(lake, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def restore_runs_file(lake: Path, content: bytes) -> None:
    """Put runs.parquet back to `content` (what it held before), atomically."""
    _replace_runs_file(lake, lambda tmp: tmp.write_bytes(content))


def _replace_runs_file(lake: Path, write) -> None:
    """write(tmp) a temporary file, then rename it over runs.parquet; the temporary file goes
    when either step fails (a runs.parquet that cannot be replaced left one per ingest)."""
    tmp = lake / f".{RUNS_FILE}.{uuid.uuid4().hex}.tmp"
    try:
        write(tmp)
        os.replace(tmp, lake / RUNS_FILE)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ---- unfinished ingests ----------------------------------------------------------------------

PENDING = "_pending"  # LAKE/_pending/NAME: an ingest of run NAME started and has not finished
# (what is wrong with a lake's files: warehouse/lake/integrity.py)


def mark_ingest_pending(lake: Path, run: str) -> None:
    folder = lake / PENDING
    folder.mkdir(exist_ok=True)
    (folder / run).touch()


def clear_ingest_pending(lake: Path, run: str) -> None:
    (lake / PENDING / run).unlink(missing_ok=True)


def pending_ingests(lake: Path) -> list[str]:
    folder = lake / PENDING
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
