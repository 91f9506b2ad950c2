"""Read one Kineto trace file: decompress, validate, and locate the raw traceEvents bytes.

The event objects themselves are typed by DuckDB (sql/ingest/events.sql); this module only
parses what DuckDB cannot give exactly: the timestamp text, whose nanosecond digits a
float64 parse would lose.
"""

from __future__ import annotations

import hashlib
import math
import re
import zlib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import msgspec
from isal import igzip

from .errors import BadTraceError

TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# Epoch nanoseconds are ~1.7e18; epoch or monotonic microseconds stay below this.
_NANOSECOND_TS_FLOOR = 1e17


class _EventHead(msgspec.Struct):
    """The fields checked before loading; everything else stays raw for DuckDB."""

    ts: msgspec.Raw = msgspec.Raw(b"")
    name: msgspec.Raw = msgspec.Raw(b"")


@dataclass
class ParsedTrace:
    path: Path
    sha256: str
    file_bytes: int
    meta: dict
    events_json: bytes
    ts_texts: list[str]
    rank: int
    rank_source: str
    time_resolution: str
    ts_scale: Decimal
    ts_offset_us: Decimal
    min_ts: Decimal | None
    warnings: list[str] = field(default_factory=list)

    @property
    def event_count(self) -> int:
        return len(self.ts_texts)


def is_trace_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES)


def read_trace(path: Path) -> ParsedTrace:
    """Parse and validate one trace file; raises BadTraceError with a one-line reason."""
    compressed = _read_bytes(path)
    text = _decompress(path, compressed)
    top = _decode_top(path, text)
    events_json = bytes(top.pop("traceEvents"))
    heads = _decode_events(path, events_json)
    ts_texts = _timestamp_texts(path, heads)
    meta = {key: msgspec.json.decode(value) for key, value in top.items()}
    return _describe(path, compressed, meta, events_json, ts_texts)


def _read_bytes(path: Path) -> bytes:
    if not path.exists():
        raise BadTraceError(path, "no such file")
    data = path.read_bytes()
    if not data:
        raise BadTraceError(path, "file is empty")
    return data


def _decompress(path: Path, data: bytes) -> bytes:
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
    except msgspec.DecodeError as exc:
        raise BadTraceError(path, f"invalid JSON: {_json_problem(text, exc)}") from None
    if "traceEvents" not in top:
        raise BadTraceError(path, "not a Kineto trace (no traceEvents array)")
    return top


def _json_problem(text: bytes, exc: Exception) -> str:
    if re.search(rb":\s*-?(NaN|Infinity)\b", text):
        return "contains NaN or Infinity, which JSON does not allow"
    return str(exc).replace("JSON is malformed: ", "")


def _decode_events(path: Path, events_json: bytes) -> list[_EventHead]:
    try:
        return msgspec.json.decode(events_json, type=list[_EventHead])
    except msgspec.ValidationError as exc:
        raise BadTraceError(path, f"traceEvents is not a list of event objects ({exc})") from None


def _timestamp_texts(path: Path, heads: list[_EventHead]) -> list[str]:
    for index, head in enumerate(heads):
        if not head.ts or not head.name:
            missing = "name" if head.ts else "ts"
            raise BadTraceError(path, f"event {index} has no '{missing}' field")
    texts = [bytes(head.ts).decode() for head in heads]
    bad = next((i for i, ts in enumerate(texts) if not _is_finite_number(ts)), None)
    if bad is not None:
        raise BadTraceError(path, f"event {bad} has a non-numeric ts ({texts[bad][:40]})")
    return texts


def _is_finite_number(text: str) -> bool:
    try:
        return math.isfinite(float(text.strip('"')))
    except ValueError:
        return False


def _describe(path, compressed, meta, events_json, ts_texts) -> ParsedTrace:
    rank, rank_source = detect_rank(path, meta)
    resolution, scale, min_ts = _time_resolution(ts_texts)
    base_ns = meta.get("baseTimeNanoseconds")
    offset = Decimal(int(base_ns)) / 1000 if isinstance(base_ns, (int, float)) else Decimal(0)
    return ParsedTrace(
        path=path, sha256=hashlib.sha256(compressed).hexdigest(), file_bytes=len(compressed),
        meta=meta, events_json=events_json, ts_texts=ts_texts, rank=rank,
        rank_source=rank_source, time_resolution=resolution, ts_scale=scale,
        ts_offset_us=offset, min_ts=min_ts,
    )


def detect_rank(path: Path, meta: dict) -> tuple[int, str]:
    """Rank from distributedInfo, else from a `rank-3`-like file name, else 0."""
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"], "distributedInfo"
    match = _RANK_IN_NAME.search(path.name)
    if match:
        return int(match.group(1)), "file name"
    return 0, "default"


def _time_resolution(ts_texts: list[str]) -> tuple[str, Decimal, Decimal | None]:
    """('ns' when values carry sub-microsecond digits or are epoch nanoseconds, scale, min ts)."""
    positive = [Decimal(t.strip('"')) for t in ts_texts if t not in ("0", '"0"')]
    if not positive:
        return "us", Decimal(1), None
    low = min(positive)
    if low > _NANOSECOND_TS_FLOOR:
        # whole nanoseconds written as integers: scale to microseconds
        return "ns", Decimal("0.001"), low / 1000
    fractional = any("." in t and not t.rstrip('0"').endswith(".") for t in ts_texts)
    return ("ns" if fractional else "us"), Decimal(1), low
