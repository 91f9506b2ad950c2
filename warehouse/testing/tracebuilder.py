"""Write Kineto-format traces for hand-made scenarios (tests, benchmarks, docs).

    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, ts=0, dur=100)
    b.cpu_op(main, "aten::relu", ts=10, dur=20)
    b.launch(main, ts=12, dur=5, kernel="relu_kernel", stream=7, kernel_ts=20, kernel_dur=30)
    b.write("trace.json.gz")

Times are microseconds relative to `base_ts`; the file gets absolute epoch values.
With `legacy=True` the same events are written as PyTorch 1.8-1.9's Kineto wrote them
(categories Operator, Runtime, Kernel, Memcpy, Memset; string tids, `stream N` GPU lanes,
`async` launch flows, the profiler's Trace span): see `legacy_events`.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_BASE_TS = 1_700_000_000_000_000  # epoch µs, like real traces


@dataclass(frozen=True)
class Thread:
    pid: int
    tid: int


@dataclass
class TraceBuilder:
    rank: int | None = 0
    world_size: int | None = None
    pid: int = 1000
    device: int = 0
    base_ts: int = DEFAULT_BASE_TS
    events: list[dict] = field(default_factory=list)
    legacy: bool = False  # write PyTorch 1.8-1.9 category names and lanes (legacy_events)
    _next_correlation: int = 1
    _next_external_id: int = 1

    # ---- lanes ---------------------------------------------------------------------------
    def thread(self, tid: int, name: str | None = None) -> Thread:
        """A CPU thread of this process, named with an `M` event when `name` is given."""
        if name:
            self._metadata("thread_name", self.pid, tid, {"name": f"thread {tid} ({name})"})
        return Thread(self.pid, tid)

    def stream(self, stream: int) -> Thread:
        self._metadata("thread_name", self.device, stream, {"name": f"stream {stream} "})
        return Thread(self.device, stream)

    def _metadata(self, name: str, pid, tid, args: dict) -> None:
        self.events.append({"name": name, "ph": "M", "ts": self.base_ts, "pid": pid, "tid": tid, "args": args})

    # ---- CPU side ------------------------------------------------------------------------
    def complete(self, lane: Thread, name: str, cat: str, ts: float, dur: float, **args) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "pid": lane.pid, "tid": lane.tid,
                 "ts": self.base_ts + ts, "dur": dur, "args": args}
        self.events.append(event)
        return event

    def cpu_op(self, lane: Thread, name: str, ts: float, dur: float, **args) -> dict:
        args.setdefault("External id", self._external_id())
        return self.complete(lane, name, "cpu_op", ts, dur, **args)

    def annotation(self, lane: Thread, name: str, ts: float, dur: float, **args) -> dict:
        return self.complete(lane, name, "user_annotation", ts, dur, **args)

    def python_function(self, lane: Thread, name: str, ts: float, dur: float, **args) -> dict:
        return self.complete(lane, name, "python_function", ts, dur, **args)

    def step(self, number: int, lane: Thread, ts: float, dur: float) -> dict:
        return self.annotation(lane, f"ProfilerStep#{number}", ts, dur)

    def runtime(self, lane: Thread, name: str, ts: float, dur: float, **args) -> dict:
        """A CUDA runtime call (cudaDeviceSynchronize, cudaEventRecord ...)."""
        args.setdefault("correlation", self._correlation())
        return self.complete(lane, name, "cuda_runtime", ts, dur, **args)

    # ---- GPU side ------------------------------------------------------------------------
    def launch(self, lane: Thread, ts: float, dur: float, kernel: str, stream: int,
               kernel_ts: float, kernel_dur: float, cat: str = "kernel",
               call: str = "cudaLaunchKernel", **kernel_args) -> tuple[dict, dict]:
        """A launch call on `lane` and the GPU op it starts, sharing a correlation id."""
        correlation = self._correlation()
        call_event = self.complete(lane, call, "cuda_runtime", ts, dur, correlation=correlation,
                                   **{"External id": correlation})
        gpu = self.gpu_op(kernel, stream, kernel_ts, kernel_dur, cat=cat, correlation=correlation,
                          **kernel_args)
        return call_event, gpu

    def gpu_op(self, name: str, stream: int, ts: float, dur: float, cat: str = "kernel", **args) -> dict:
        args.setdefault("device", self.device)
        args["stream"] = stream
        return self.complete(Thread(self.device, stream), name, cat, ts, dur, **args)

    def cuda_sync(self, name: str, stream: int, ts: float, dur: float, correlation: int, **args) -> dict:
        """A GPU-side sync event (traces taken with enable_cuda_sync_events)."""
        return self.gpu_op(name, stream, ts, dur, cat="cuda_sync", correlation=correlation, **args)

    # ---- ids and output ------------------------------------------------------------------
    def _correlation(self) -> int:
        self._next_correlation += 1
        return self._next_correlation - 1

    def _external_id(self) -> int:
        self._next_external_id += 1
        return self._next_external_id - 1

    def to_dict(self) -> dict:
        events = legacy_events(self.events) if self.legacy else list(self.events)
        trace: dict = {"schemaVersion": 1, "traceEvents": events}
        if self.rank is not None:
            info = {"rank": self.rank}
            if self.world_size is not None:
                info["world_size"] = self.world_size
            trace["distributedInfo"] = info
        trace["traceName"] = "ctda-sql trace builder"
        return trace

    def write(self, path: str | Path) -> Path:
        """Write the trace as JSON, gzipped when the name ends in .gz."""
        path = Path(path)
        text = json.dumps(self.to_dict())
        if path.name.endswith(".gz"):
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)
        return path


# ---- PyTorch 1.8-1.9 Kineto (the TensorBoard plugin's samples) ---------------------------
# Their categories, by the modern name each became. Record_function ranges (user_annotation,
# ProfilerStep#N included) were Operator rows too. Sync events and GPU copies of annotations
# did not exist then: a scenario holding them has no legacy form.
LEGACY_CATEGORIES = {"cpu_op": "Operator", "user_annotation": "Operator", "cuda_runtime": "Runtime",
                     "kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}
_LEGACY_KEPT = {"python_function"}
_LEGACY_GPU = ("Kernel", "Memcpy", "Memset")


def legacy_events(events: list[dict]) -> list[dict]:
    """`events` as PyTorch 1.8-1.9 wrote them (libkineto's output_json.cpp of that time):
    categories renamed (LEGACY_CATEGORIES); CPU tids as strings; GPU lanes `stream N`; a runtime
    call's `external id` is the External id of the op it runs in (0 outside any), copied to
    the GPU op it launched; each launch gets an `s`/`f` flow of cat `async`; and the profiler's
    `Trace` span and window-end instant frame the events."""
    enclosing_op = _enclosing_op_ids(events)
    out: list[dict] = []
    calls: dict[int, dict] = {}  # runtime calls by correlation
    for index, event in enumerate(events):
        event = {**event, "args": dict(event.get("args", {}))}
        if event["ph"] == "M":  # a stream's name goes to its `stream N` lane
            stream_lane = str(event["args"].get("name", "")).startswith("stream ")
            event["tid"] = f"stream {event['tid']}" if stream_lane else str(event["tid"])
            out.append(event)
            continue
        cat = event.get("cat")
        if cat not in LEGACY_CATEGORIES and cat not in _LEGACY_KEPT:
            raise ValueError(f"category {cat!r} ({event['name']}) has no PyTorch 1.8-1.9 form")
        event["cat"] = LEGACY_CATEGORIES.get(cat, cat)
        args = event["args"]
        if event["cat"] == "Runtime":
            args.pop("External id", None)
            args["external id"] = enclosing_op.get(index, 0)
            if "correlation" in args:
                calls[args["correlation"]] = event
        event["tid"] = f"stream {args['stream']}" if event["cat"] in _LEGACY_GPU else str(event["tid"])
        out.append(event)
    flows = []
    for event in out:
        call = calls.get(event["args"].get("correlation")) if event.get("cat") in _LEGACY_GPU else None
        if call is not None:
            event["args"]["external id"] = call["args"]["external id"]
            flows += _launch_flow(call, event)
    return out + flows + _profiler_span(out)


def _enclosing_op_ids(events: list[dict]) -> dict[int, int]:
    """For each runtime call (by index), the External id of the innermost cpu_op of its
    thread that contains it: one sorted sweep per thread with a stack of open ops."""
    timed = [(i, e) for i, e in enumerate(events)
             if e["ph"] == "X" and e.get("cat") in ("cpu_op", "cuda_runtime")]
    # by thread, start, ops before calls at the same start, longer first
    timed.sort(key=lambda ie: (str(ie[1]["pid"]), str(ie[1]["tid"]), ie[1]["ts"],
                               ie[1]["cat"] != "cpu_op", -ie[1]["dur"]))
    found: dict[int, int] = {}
    stack: list[dict] = []
    lane = None
    for index, event in timed:
        if (event["pid"], event["tid"]) != lane:
            lane, stack = (event["pid"], event["tid"]), []
        end = event["ts"] + event["dur"]
        while stack and stack[-1]["ts"] + stack[-1]["dur"] < end:
            stack.pop()
        if event["cat"] == "cpu_op":
            stack.append(event)
        elif stack:
            found[index] = stack[-1]["args"].get("External id", 0)
    return found


def _launch_flow(call: dict, gpu: dict) -> list[dict]:
    """The `s` (at the call, numeric tid) and `f` (at the GPU op) flow events of one launch."""
    correlation = call["args"]["correlation"]
    tid = int(call["tid"]) if call["tid"].lstrip("-").isdigit() else call["tid"]
    return [{"ph": "s", "id": correlation, "pid": call["pid"], "tid": tid, "ts": call["ts"],
             "cat": "async", "name": "launch"},
            {"ph": "f", "id": correlation, "pid": gpu["pid"], "tid": gpu["tid"], "ts": gpu["ts"],
             "cat": "async", "name": "launch", "bp": "e"}]


def _profiler_span(events: list[dict]) -> list[dict]:
    """The profiler's own `Trace` span over all timed events, and the window-end instant."""
    timed = [e for e in events if e["ph"] == "X"]
    if not timed:
        return []
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + e["dur"] for e in timed)
    return [{"ph": "X", "cat": "Trace", "ts": start, "dur": end - start, "pid": "Traces",
             "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
            {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": end}]
