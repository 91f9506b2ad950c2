"""Synthesize a large multi-rank job from one real Kineto trace, for the scale benchmark.

Each rank file is the base trace's events tiled `tiles` times back to back in time (tile k
shifted by k trace spans plus a small gap), so a rank of ns_resolution (68.7k events) tiled 7x
holds ~480k events. Per tile the step numbers, correlation ids (and the ac2g flow ids that
mirror them), External ids and Sequence numbers are renumbered so they stay unique within the
rank. Per rank the whole timeline is shifted by a rank skew plus per-tile jitter (whole
nanoseconds, so nesting inside a tile is untouched), and distributedInfo gets the rank and
world size. Timestamps are written as exact nanosecond text (no float rounding).

With --python-frames DEPTH each top-level cpu_op of the base trace gets DEPTH python_function
frames spanning it, as a with_stack=True trace has (none of the shared traces does).

Usage: python bench/synth.py OUT_DIR [--ranks 16] [--events 500000] [--base ns_resolution]
                             [--python-frames DEPTH]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

import msgspec
from isal import igzip

# gap between tiles, so a tile's last GPU work never overlaps the next tile's first step
TILE_GAP_NS = 1_000_000
RANK_SKEW_NS = 50_000
TILE_JITTER_NS = 5_000
# isal level 1: the output only needs to be a realistic .json.gz, quickly
GZIP_LEVEL = 1


@dataclass
class BaseTrace:
    top: dict  # top-level keys except traceEvents, decoded
    events: list[dict]  # decoded events with 'ts' replaced by integer nanoseconds
    span_ns: int  # from the earliest ts to the latest end
    id_span: int  # correlation / flow id stride per tile
    external_span: int
    sequence_span: int
    step_span: int

    @property
    def timed_event_count(self) -> int:
        return sum(1 for e in self.events if e.get("ph") != "M")


class _RawEvent(msgspec.Struct):
    ts: msgspec.Raw = msgspec.Raw(b"")


def load_base(path: Path) -> BaseTrace:
    text = igzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    top = msgspec.json.decode(text, type=dict[str, msgspec.Raw])
    raw_events = bytes(top.pop("traceEvents"))
    events = msgspec.json.decode(raw_events)
    # the exact ts text (float decoding would drop the nanosecond digits)
    for event, head in zip(events, msgspec.json.decode(raw_events, type=list[_RawEvent])):
        event["ts"] = _ts_ns(bytes(head.ts))
    meta = {key: msgspec.json.decode(value) for key, value in top.items()}
    return _with_spans(meta, events)


def _ts_ns(text: bytes) -> int:
    return int(Decimal(text.decode().strip('"') or "0") * 1000)


def _with_spans(meta: dict, events: list[dict]) -> BaseTrace:
    timed = [e for e in events if e.get("ph") != "M" and e["ts"] > 0]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + int((e.get("dur") or 0) * 1000) for e in timed)
    args = [e.get("args") or {} for e in events]
    ids = [a.get("correlation", 0) for a in args] + [e.get("id", 0) for e in events if isinstance(e.get("id"), int)]
    steps = [_step_number(e.get("name")) for e in events]
    steps = [s for s in steps if s is not None] or [0]
    return BaseTrace(
        top=meta, events=events, span_ns=end - start,
        id_span=max(ids) + 1,
        external_span=max(a.get("External id", 0) for a in args) + 1,
        sequence_span=max(a.get("Sequence number", 0) for a in args) + 1,
        step_span=max(steps) - min(steps) + 1,
    )


def with_python_frames(base: BaseTrace, depth: int) -> BaseTrace:
    """`base` with `depth` python_function frames around each top-level cpu_op of each thread
    (one starting at or after the end of every earlier op of its thread), each frame spanning
    the op exactly, so they nest without overlapping their neighbours."""
    if depth <= 0:
        return base
    ops = sorted((e for e in base.events if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["ts"] > 0),
                 key=lambda e: (str(e.get("pid")), str(e.get("tid")), e["ts"], -(e.get("dur") or 0)))
    frames, lane, lane_end = [], None, -1
    for op in ops:
        end = op["ts"] + int((op.get("dur") or 0) * 1000)
        if (op.get("pid"), op.get("tid")) != lane:
            lane, lane_end = (op.get("pid"), op.get("tid")), -1
        if op["ts"] >= lane_end:
            frames.extend({"ph": "X", "cat": "python_function", "name": f"train.py({40 + level}): level_{level}",
                           "pid": op.get("pid"), "tid": op.get("tid"), "ts": op["ts"], "dur": op.get("dur") or 0,
                           "args": {"Python id": len(frames) + level}}
                          for level in range(depth))
        lane_end = max(lane_end, end)
    return replace(base, events=base.events + frames)


def _step_number(name) -> int | None:
    if isinstance(name, str) and name.startswith("ProfilerStep#") and name[13:].isdigit():
        return int(name[13:])
    return None


def tiles_for(base: BaseTrace, events_per_rank: int) -> int:
    return max(1, round(events_per_rank / base.timed_event_count))


def rank_events(base: BaseTrace, rank: int, tiles: int, seed: int = 0) -> list[dict]:
    """The events of one rank: metadata once, then `tiles` renumbered, shifted copies."""
    rng = random.Random(seed * 1_000_003 + rank)
    skew = rng.randrange(RANK_SKEW_NS)
    events = [_shifted(e, 0, skew, base) for e in base.events if e.get("ph") == "M"]
    for tile in range(tiles):
        shift = skew + tile * (base.span_ns + TILE_GAP_NS) + rng.randrange(TILE_JITTER_NS)
        events.extend(_shifted(e, tile, shift, base) for e in base.events if e.get("ph") != "M")
    return events


def _shifted(event: dict, tile: int, shift_ns: int, base: BaseTrace) -> dict:
    copy = dict(event)
    ts = event["ts"]
    copy["ts"] = msgspec.Raw(_ts_text(ts + shift_ns if ts else 0))
    if tile:
        _renumber(copy, tile, base)
    return copy


def _ts_text(ns: int) -> bytes:
    return f"{ns // 1000}.{ns % 1000:03d}".encode()


def _renumber(event: dict, tile: int, base: BaseTrace) -> None:
    if "id" in event and isinstance(event["id"], int):
        event["id"] += tile * base.id_span
    step = _step_number(event.get("name"))
    if step is not None:
        event["name"] = f"ProfilerStep#{step + tile * base.step_span}"
    args = event.get("args")
    if not args:
        return
    args = event["args"] = dict(args)
    for key, span in (("correlation", base.id_span), ("External id", base.external_span),
                      ("Sequence number", base.sequence_span)):
        if isinstance(args.get(key), int) and args[key] >= 0:
            args[key] += tile * span


def rank_document(base: BaseTrace, rank: int, world_size: int, tiles: int, seed: int = 0) -> bytes:
    top = dict(base.top)
    info = dict(top.get("distributedInfo") or {})
    info.update(rank=rank, world_size=world_size)
    top["distributedInfo"] = info
    top["traceEvents"] = rank_events(base, rank, tiles, seed)
    return msgspec.json.encode(top)


# ---- writing a job ----------------------------------------------------------------------

_BASE: BaseTrace | None = None


def _init_worker(base_path: str, python_frames: int = 0) -> None:
    global _BASE
    _BASE = with_python_frames(load_base(Path(base_path)), python_frames)


def _write_rank(job: tuple) -> tuple[str, int, int]:
    out_dir, rank, world_size, tiles, seed = job
    document = rank_document(_BASE, rank, world_size, tiles, seed)
    path = Path(out_dir) / f"rank-{rank}.json.gz"
    path.write_bytes(igzip.compress(document, compresslevel=GZIP_LEVEL))
    return str(path), len(document), tiles * _BASE.timed_event_count + len(_BASE.events) - _BASE.timed_event_count


def write_job(base_path: Path, out_dir: Path, ranks: int, events_per_rank: int,
              seed: int = 0, workers: int | None = None, python_frames: int = 0) -> dict:
    """Write rank-N.json.gz files; returns {files, raw_json_bytes, events, tiles}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tiles = tiles_for(with_python_frames(load_base(base_path), python_frames), events_per_rank)
    jobs = [(str(out_dir), rank, ranks, tiles, seed) for rank in range(ranks)]
    workers = workers or min(ranks, os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(str(base_path), python_frames)) as pool:
        written = list(pool.map(_write_rank, jobs))
    return {
        "files": [w[0] for w in written],
        "raw_json_bytes": sum(w[1] for w in written),
        "events": sum(w[2] for w in written),
        "tiles": tiles,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--events", type=int, default=500_000, help="events per rank (approximate)")
    parser.add_argument("--base", default="ns_resolution", help="shared trace to tile")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--python-frames", type=int, default=0, metavar="DEPTH",
                        help="python_function frames around each top-level cpu_op (with_stack=True)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from common import traces_dir

    job = write_job(traces_dir() / f"{args.base}.json.gz", args.out_dir, args.ranks, args.events, args.seed,
                    python_frames=args.python_frames)
    print(f"{len(job['files'])} ranks x {job['tiles']} tiles: {job['events']:,} events, "
          f"{job['raw_json_bytes'] / 1e6:,.0f} MB of JSON in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
