"""Property tests: on generated two-thread, two-stream training steps, every invariant of the
critical path holds (chain of real edges, disjoint counted windows moving back in time,
0 < CPCR <= 1, per_thread never above ctda, counted + remainder = step)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_helpers import analyzed
from invariants import broken_invariants
from warehouse.tracebuilder import TraceBuilder

OP_NAMES = ("aten::linear", "aten::relu", "aten::mse_loss", "aten::add_", "enumerate(DataLoader)#next")

action = st.fixed_dictionaries({
    "on_autograd": st.booleans(),
    "name": st.sampled_from(OP_NAMES),
    "gap_us": st.integers(0, 30),
    "cpu_us": st.integers(1, 200),
    "launch_stream": st.sampled_from([None, 7, 20]),
    "launch_at": st.floats(0.0, 0.9),
    "kernel_us": st.integers(1, 400),
    "sync": st.sampled_from([None, None, None, "cudaDeviceSynchronize", "cudaStreamSynchronize"]),
})


class StepSimulator:
    """Lays generated actions out in time the way a GIL-serialized PyTorch step runs."""

    def __init__(self):
        self.b = TraceBuilder(rank=0)
        self.lanes = {False: self.b.thread(100, "pt_main_thread"), True: self.b.thread(200, "pt_autograd_0")}
        self.clock = 0.0
        self.stream_free = {7: 0.0, 20: 0.0}

    def run(self, actions: list[dict]) -> TraceBuilder:
        for act in actions:
            self._one(act)
        self.b.step(1, self.lanes[False], 0, self.clock + 1)
        return self.b

    def _one(self, act: dict) -> None:
        lane = self.lanes[act["on_autograd"]]
        start = self.clock + act["gap_us"]
        self.b.cpu_op(lane, act["name"], start, act["cpu_us"])
        if act["launch_stream"] is not None:
            self._launch(lane, act, start)
        self.clock = start + act["cpu_us"]
        if act["sync"]:
            self._sync(lane, act["sync"])

    def _launch(self, lane, act: dict, op_start: float) -> None:
        launch_start = op_start + act["launch_at"] * (act["cpu_us"] - 0.5)
        stream = act["launch_stream"]
        kernel_start = max(launch_start + 0.5 + 2, self.stream_free[stream])
        self.b.launch(lane, launch_start, 0.5, f"kernel_{act['name']}", stream, kernel_start, act["kernel_us"])
        self.stream_free[stream] = kernel_start + act["kernel_us"]

    def _sync(self, lane, call: str) -> None:
        waited = max(self.stream_free.values()) if call == "cudaDeviceSynchronize" else self.stream_free[7]
        end = max(self.clock + 1, waited + 1)
        self.b.runtime(lane, call, self.clock, end - self.clock)
        self.clock = end


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=1, max_size=12))
def test_generated_steps_keep_every_invariant(actions):
    with tempfile.TemporaryDirectory() as folder:
        con = analyzed(StepSimulator().run(actions), Path(folder))
        try:
            assert broken_invariants(con) == {}
        finally:
            con.close()
