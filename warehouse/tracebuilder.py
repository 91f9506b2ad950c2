"""Write Kineto-format traces for hand-made scenarios (tests, benchmarks, docs).

    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, ts=0, dur=100)
    b.cpu_op(main, "aten::relu", ts=10, dur=20)
    b.launch(main, ts=12, dur=5, kernel="relu_kernel", stream=7, kernel_ts=20, kernel_dur=30)
    b.write("trace.json.gz")

Times are microseconds relative to `base_ts`; the file gets absolute epoch values.
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
        trace: dict = {"schemaVersion": 1, "traceEvents": list(self.events)}
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
