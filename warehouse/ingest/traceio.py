"""Read one Kineto trace file: decompress, validate, and type its events.

Python only touches the file as a whole (gunzip, the top-level keys); every per-event field
is typed by DuckDB in one JSON parse (sql/ingest/typed_events.sql) into an Arrow table, so
no Python object is made per event. DuckDB reads `ts` as DECIMAL from the number text, which
keeps the nanosecond digits a float64 parse would lose. This runs in the ingest worker
processes, so a bad file is refused before the database is touched.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import duckdb
import msgspec
import numpy as np
import pyarrow as pa
from isal import igzip

from ctda_sql.core import sqlfiles
from ctda_sql.core.errors import BadTraceError, CtdaError

TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# Epoch nanoseconds are ~1.7e18; epoch or monotonic microseconds stay below this.
_NANOSECOND_TS_FLOOR = 1e17
# Epoch nanoseconds stay below this until the year 2286; larger ts are not times.
_TS_LIMIT = 10**19
# The typing query reads the events from a file in a folder named after the owning process,
# so that the next ingest can remove folders whose owner was killed (SIGKILL skips cleanup).
_PARSE_FOLDER_PREFIX = "ctda-parse-"
_PARSE_FOLDER_NAME = re.compile(re.escape(_PARSE_FOLDER_PREFIX) + r"(\d+)-")
_TOO_DEEP = "JSON nested too deeply to read (thousands of levels)"
# Rows in a DuckDB row group. Typed events leave the worker in Arrow batches of exactly this
# many rows: a parallel insert then writes each batch as a full row group of its own, in order
# (ingest.insert_events); unaligned batches leave part-filled row groups and free blocks.
DUCKDB_ROW_GROUP_ROWS = 122_880


class _EventHead(msgspec.Struct):
    """The fields the reference checks read (only for files the SQL flags as suspect)."""

    ts: msgspec.Raw = msgspec.Raw(b"")
    name: msgspec.Raw = msgspec.Raw(b"")


@dataclass
class ParsedTrace:
    path: Path
    sha256: str
    file_bytes: int
    meta: dict
    # one row per traceEvent, in file order, typed by sql/ingest/typed_events.sql; None while
    # spilled to events_file (spill_events) and once inserted (release_events)
    events: pa.Table | None
    event_count: int
    rank: int
    rank_source: str
    time_resolution: str
    ts_scale: Decimal
    ts_offset_us: Decimal
    min_ts: Decimal | None
    # sql/ingest/odd_fields.sql: counts of recoverable oddities, for ingest's warning line
    odd_field_counts: tuple[int, ...] = ()
    events_file: Path | None = None

    def spill_events(self, events_file: Path) -> None:
        """Write the events to an Arrow IPC file and let go of them: a parse worker hands the
        main process a path instead of pickling the table through a pipe, and a batch of many
        ranks waits on disk, not in memory, for its insert (the run's origin, the earliest ts
        of the batch, is known only once every file is parsed)."""
        try:
            with pa.OSFile(str(events_file), "wb") as sink, pa.ipc.new_file(sink, self.events.schema) as writer:
                writer.write_table(self.events)
        except OSError as exc:  # a full or missing temp folder: the user's to fix, not a bug
            events_file.unlink(missing_ok=True)
            raise CtdaError(f"{self.path}: cannot stage its parsed events in {events_file.parent} "
                            f"({exc}); free space there or set TMPDIR to a folder with room") from None
        self.events, self.events_file = None, events_file

    def map_events(self) -> pa.Table:
        """The events, memory-mapped from events_file if spilled: no copy, and the pages are
        the page cache's to drop once the table is released."""
        if self.events is None:
            if self.events_file is None:
                raise ValueError(f"{self.path}: events were released")
            self.events = pa.ipc.open_file(pa.memory_map(str(self.events_file))).read_all()
        return self.events

    def release_events(self) -> None:
        """Drop the events (and their mapping) once they are in a warehouse."""
        self.events, self.events_file = None, None


def check_regular_file(path: Path) -> None:
    """Refuse what is not a plain file (a FIFO would block the read forever)."""
    if not path.exists():
        raise BadTraceError(path, "no such file")
    if not path.is_file():
        kind = "a named pipe (FIFO)" if path.is_fifo() else "a folder" if path.is_dir() else "a device or socket"
        raise BadTraceError(path, f"not a regular file ({kind}); give a trace file or a folder of them")


def is_trace_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES)


def read_trace(path: Path, duckdb_threads: int | None = None, on_stage=None) -> ParsedTrace:
    """Parse and validate one trace file; raises BadTraceError with a one-line reason.

    duckdb_threads caps the typing query's threads (worker processes share the cores);
    on_stage(name, size_bytes) hears each stage begin (progress.stage_bar shows them)."""
    stage = on_stage or (lambda name, size: None)
    compressed = _read_bytes(path)
    stage("decompressing", len(compressed))
    text = decompress(path, compressed)
    stage("reading the JSON", len(text))
    top = _decode_top(path, text)
    # a view into `text`, not a copy: copying a large events array costs tens of ms a file
    events_json = memoryview(top.pop("traceEvents"))
    if re.fullmatch(rb"\s*\[\s*\]\s*", events_json):
        raise BadTraceError(path, "traceEvents is empty: the trace holds no events")
    meta = _decode_meta(path, top)
    con = _typing_connection(duckdb_threads).cursor()  # closing it drops its results and views
    try:
        stage("typing the events", len(events_json))
        events = _type_events(path, con, events_json)
        con.register("events", events)
        stage("checking the events", len(events_json))
        _check_events(path, con, events_json)
        resolution, scale, min_ts = _time_resolution(con)
        odd_field_counts = tuple(con.execute(sqlfiles.load("ingest/odd_fields.sql")).fetchone())
    finally:
        con.close()
    return _describe(path, compressed, meta, events, (resolution, scale, min_ts), odd_field_counts)


_TYPING_CONNECTIONS: dict[int, duckdb.DuckDBPyConnection] = {}


def _typing_connection(threads: int | None) -> duckdb.DuckDBPyConnection:
    """One in-memory DuckDB per process, reused: opening one costs ~30 ms a file."""
    con = _TYPING_CONNECTIONS.get(os.getpid())
    if con is None:
        con = _TYPING_CONNECTIONS[os.getpid()] = duckdb.connect()
        con.execute("SET preserve_insertion_order = true")
        # args and extra leave as Arrow JSON, so the warehouse need not re-validate them
        con.execute("SET arrow_lossless_conversion = true")
    con.execute(f"SET threads = {int(threads or os.cpu_count() or 1)}")
    return con


def _read_bytes(path: Path) -> bytes:
    check_regular_file(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadTraceError(path, f"cannot read it ({exc.strerror or exc})") from None
    if not data:
        raise BadTraceError(path, "file is empty")
    return data


def decompress(path: Path, data: bytes) -> bytes:
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        text = igzip.decompress(data)
    except (EOFError, OSError, zlib.error, ValueError) as exc:
        raise BadTraceError(path, f"truncated or corrupt gzip data ({exc})") from None
    if not text.strip():
        raise BadTraceError(path, "file is empty (after decompression)")
    return text


def _decode_top(path: Path, text: bytes) -> dict[str, msgspec.Raw]:
    try:
        top = msgspec.json.decode(text, type=dict[str, msgspec.Raw])
    except msgspec.ValidationError:
        raise BadTraceError(path, "not a Kineto trace (top level is not a JSON object)") from None
    except RecursionError:
        raise BadTraceError(path, _TOO_DEEP) from None
    except msgspec.DecodeError as exc:
        raise BadTraceError(path, f"invalid JSON: {_json_problem(text, exc)}") from None
    if "traceEvents" not in top:
        raise BadTraceError(path, "not a Kineto trace (no traceEvents array)")
    return top


def _decode_meta(path: Path, top: dict[str, msgspec.Raw]) -> dict:
    try:
        return {key: msgspec.json.decode(value) for key, value in top.items()}
    except RecursionError:
        raise BadTraceError(path, _TOO_DEEP) from None


def _json_problem(text: bytes, exc: Exception) -> str:
    if re.search(rb":\s*-?(NaN|Infinity)\b", text):
        return "contains NaN or Infinity, which JSON does not allow"
    return str(exc).replace("JSON is malformed: ", "")


def _type_events(path: Path, con, events_json: memoryview) -> pa.Table:
    """The events as typed columns, one DuckDB JSON parse per event (no Python per event).

    DuckDB reads one JSON array on one thread, whatever its thread count: with threads to
    spare, a big array is typed in parts at once (sql/ingest/typed_events.sql per part, each
    on its own cursor and thread), which halves a lone 200k-event file's typing on 2 cores."""
    sql = sqlfiles.load("ingest/typed_events.sql")
    parts = _array_parts(events_json, _duckdb_threads(con))
    with parse_folder() as folder:
        files = [_write_part(Path(folder) / f"events-{i}.json", part, len(parts) > 1)
                 for i, (part, _) in enumerate(parts)]
        try:
            tables = _typed_parts(con, sql, [(str(f), first) for f, (_, first) in zip(files, parts)])
        except duckdb.InterruptException:
            raise  # Ctrl-C, not a bad file
        except duckdb.Error as exc:
            _decode_events(path, events_json)  # raises the precise message when it can
            raise BadTraceError(path, f"traceEvents could not be read ({exc})") from None
    return _in_file_order(tables[0] if len(tables) == 1 else pa.concat_tables(tables))


# a part is worth its own thread from this many events on; parts end on DuckDB row groups,
# so the parts' Arrow batches stay whole row groups for the insert (ingest.insert_events)
_PART_MIN_EVENTS = DUCKDB_ROW_GROUP_ROWS
_SPLIT_MIN_BYTES = 16 << 20


def _duckdb_threads(con) -> int:
    return int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])


def _array_parts(events_json: memoryview, threads: int) -> list[tuple[memoryview, int]]:
    """(the array, or the text of consecutive events in it, first event's index) per part:
    the whole array when there is one thread, the array is small, or it cannot be split
    (a malformed array stays whole, for the precise error message of the whole)."""
    whole = [(events_json, 0)]
    if threads < 2 or len(events_json) < _SPLIT_MIN_BYTES:
        return whole
    try:
        events = msgspec.json.decode(events_json, type=list[msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return whole
    count = len(events)
    firsts = [0] + sorted({first for k in range(1, threads)
                           if 0 < (first := round(count * k / threads / _PART_MIN_EVENTS) * _PART_MIN_EVENTS) < count})
    base = _address(events_json)
    parts = []
    for first, following in zip(firsts, [*firsts[1:], count]):
        head, last = memoryview(events[first]), memoryview(events[following - 1])
        start, stop = _address(head) - base, _address(last) - base + len(last)
        # msgspec's Raw is a view into the input: checked before slicing the input by it
        if not (0 <= start < stop <= len(events_json)
                and events_json[start:start + len(head)] == head and events_json[stop - len(last):stop] == last):
            return whole
        parts.append((events_json[start:stop], first))
    return parts if len(parts) > 1 else whole


def _address(buffer) -> int:
    return np.frombuffer(buffer, dtype=np.uint8).ctypes.data


def _write_part(path: Path, text: memoryview, bracket: bool) -> Path:
    with open(path, "wb") as out:
        if bracket:
            out.write(b"[")
        out.write(text)
        if bracket:
            out.write(b"]")
    return path


def _typed_parts(con, sql: str, parts: list[tuple[str, int]]) -> list[pa.Table]:
    """sql/ingest/typed_events.sql on each (part file, its first event's index), each part on
    a cursor and thread of its own."""
    def typed(cursor, part: tuple[str, int]) -> pa.Table:
        events_file, first = part
        return cursor.sql(sql, params={"events_file": events_file, "first_event_id": first}).to_arrow_table(
            batch_size=DUCKDB_ROW_GROUP_ROWS)

    if len(parts) == 1:
        return [typed(con, parts[0])]
    from concurrent.futures import ThreadPoolExecutor

    cursors = [con.cursor() for _ in parts]
    try:
        with ThreadPoolExecutor(len(parts)) as pool:
            futures = [pool.submit(typed, cursor, part) for cursor, part in zip(cursors, parts)]
            try:
                return [future.result() for future in futures]
            except BaseException:  # Ctrl-C or a bad part: stop the other parts' queries too
                for cursor in cursors:
                    cursor.interrupt()
                raise
    finally:
        for cursor in cursors:
            cursor.close()


def parse_folder() -> tempfile.TemporaryDirectory:
    """A temporary folder owned by this process, for parse files that must outlive one call
    (spilled events); remove_abandoned_parse_folders clears it if the process is killed."""
    return tempfile.TemporaryDirectory(prefix=f"{_PARSE_FOLDER_PREFIX}{os.getpid()}-")


def remove_abandoned_parse_folders() -> list[Path]:
    """Remove the parse folders left by killed ingests (their owner process is gone)."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{_PARSE_FOLDER_PREFIX}*"):
        owner = _PARSE_FOLDER_NAME.match(folder.name)
        if owner and folder.is_dir() and not _process_alive(int(owner.group(1))):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _in_file_order(events: pa.Table) -> pa.Table:
    """The query relies on DuckDB keeping scan order; sort only if it ever did not."""
    if np.array_equal(events["event_id"].to_numpy(), np.arange(events.num_rows)):
        return events
    return in_row_group_batches(events.sort_by("event_id"))


def in_row_group_batches(table: pa.Table) -> pa.Table:
    """`table` in batches of DUCKDB_ROW_GROUP_ROWS rows (the last one shorter); no copy when it
    already is."""
    sizes = [batch.num_rows for batch in table.to_batches()]
    if all(size == DUCKDB_ROW_GROUP_ROWS for size in sizes[:-1]) and sizes[-1:] <= [DUCKDB_ROW_GROUP_ROWS]:
        return table
    return pa.Table.from_batches(
        [batch for start in range(0, table.num_rows, DUCKDB_ROW_GROUP_ROWS)
         for batch in table.slice(start, DUCKDB_ROW_GROUP_ROWS).combine_chunks().to_batches()],
        schema=table.schema)


def _check_events(path: Path, con, events_json: memoryview) -> None:
    """Refuse events without ts or name, with a non-numeric ts, or with an invalid dur."""
    suspect = con.execute("SELECT bool_or(suspect_ts) FROM events").fetchall()[0][0]
    if suspect:
        # the reference checks in Python give the exact message; only bad-looking files pay
        _timestamp_texts(path, _decode_events(path, events_json))
    _check_durations(path, con)
    _check_ts_range(path, con)
    _check_step_numbers(path, con)


def _check_ts_range(path: Path, con) -> None:
    bad = con.execute("SELECT event_id, ts_raw::VARCHAR FROM events WHERE abs(ts_raw) >= $limit "
                      "ORDER BY event_id LIMIT 1", {"limit": _TS_LIMIT}).fetchall()
    if bad:
        raise BadTraceError(path, _ts_out_of_range(bad[0][0], bad[0][1]))


def _check_step_numbers(path: Path, con) -> None:
    """A ProfilerStep#N whose N does not fit a BIGINT would silently become no step at all."""
    bad = con.execute(sqlfiles.load("ingest/huge_step_numbers.sql")).fetchall()
    if bad:
        raise BadTraceError(path, f"event {bad[0][0]} is {bad[0][1][:60]}: the step number is too large "
                                  "(at most 9223372036854775807)")


def _check_durations(path: Path, con) -> None:
    bad = con.execute(
        "SELECT event_id, dur_text FROM events WHERE dur_text IS NOT NULL "
        "AND (dur_raw IS NULL OR isnan(dur_raw) OR dur_raw < 0) ORDER BY event_id LIMIT 1"
    ).fetchall()
    if bad:
        raise BadTraceError(path, f"event {bad[0][0]} has an invalid duration ({bad[0][1]})")


def _decode_events(path: Path, events_json: memoryview) -> list[_EventHead]:
    try:
        return msgspec.json.decode(events_json, type=list[_EventHead])
    except msgspec.ValidationError as exc:
        raise BadTraceError(path, f"traceEvents is not a list of event objects ({exc})") from None


def _timestamp_texts(path: Path, heads: list[_EventHead]) -> list[str]:
    for index, head in enumerate(heads):
        for key, value in (("ts", head.ts), ("name", head.name)):
            if not value:
                raise BadTraceError(path, f"event {index} has no '{key}' field")
            if bytes(value) == b"null":
                raise BadTraceError(path, f"event {index} has a null '{key}'")
    texts = [bytes(head.ts).decode() for head in heads]
    for index, text in enumerate(texts):
        value = _number(text)
        if value is None:
            raise BadTraceError(path, f"event {index} has a non-numeric ts ({text[:40]})")
        if abs(value) >= _TS_LIMIT:
            raise BadTraceError(path, _ts_out_of_range(index, text))
    return texts


def _number(text: str) -> float | None:
    """The finite number a ts text holds, else None."""
    try:
        value = float(text.strip('"'))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _ts_out_of_range(event_id: int, text: str) -> str:
    shown = text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"
    return f"event {event_id} has a ts out of range ({shown}); timestamps must stay below 1e19"


def _describe(path, compressed, meta, events, time_info, odd_field_counts) -> ParsedTrace:
    rank, rank_source = detect_rank(path, meta)
    resolution, scale, min_ts = time_info
    base_ns = meta.get("baseTimeNanoseconds")
    offset = Decimal(int(base_ns)) / 1000 if isinstance(base_ns, (int, float)) else Decimal(0)
    return ParsedTrace(
        path=path, sha256=hashlib.sha256(compressed).hexdigest(), file_bytes=len(compressed),
        meta=meta, events=events, event_count=events.num_rows, rank=rank, rank_source=rank_source,
        time_resolution=resolution, ts_scale=scale, ts_offset_us=offset, min_ts=min_ts,
        odd_field_counts=odd_field_counts,
    )


# ranks are stored as INTEGER: a larger one would overflow in the insert
_MAX_RANK = 2**31 - 1


def detect_rank(path: Path, meta: dict) -> tuple[int, str]:
    """Rank from distributedInfo, else from a `rank-3`-like file name, else 0."""
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and not isinstance(info["rank"], bool):
        return _checked_rank(path, info["rank"], "distributedInfo"), "distributedInfo"
    match = _RANK_IN_NAME.search(path.name)
    if match:
        return _checked_rank(path, int(match.group(1)), "file name"), "file name"
    return 0, "default"


def _checked_rank(path: Path, rank: int, source: str) -> int:
    if not 0 <= rank <= _MAX_RANK:
        shown = str(rank) if len(str(rank)) <= 30 else f"{str(rank)[:12]}... ({len(str(rank))} digits)"
        raise BadTraceError(path, f"the rank in its {source} ({shown}) is not a rank from 0 to {_MAX_RANK}")
    return rank


def _time_resolution(con) -> tuple[str, Decimal, Decimal | None]:
    """('ns' when values carry sub-microsecond digits or are epoch nanoseconds, scale, min ts)."""
    low = con.execute("SELECT min(ts_raw) FILTER (WHERE NOT unset_ts) FROM events").fetchall()[0][0]
    if low is None:
        return "us", Decimal(1), None
    if low > _NANOSECOND_TS_FLOOR:
        # whole nanoseconds written as integers: scale to microseconds
        return "ns", Decimal("0.001"), low  # min_ts stays raw: the run origin scales it
    # the first fractional ts settles it (a bool_or would read every DECIMAL(38,6) of the file)
    fractional = con.execute("SELECT 1 FROM events WHERE ts_raw <> trunc(ts_raw) LIMIT 1").fetchall()
    return ("ns" if fractional else "us"), Decimal(1), low
