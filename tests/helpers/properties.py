"""Generated training steps for the property tests (hypothesis)."""

from __future__ import annotations

from hypothesis import strategies as st

from ctda_sql.testing.tracebuilder import TraceBuilder

OP_NAMES = ("aten::linear", "aten::relu", "aten::mse_loss", "aten::add_", "enumerate(DataLoader)#next")
action = st.fixed_dictionaries({
    "on_autograd": st.booleans(),
    "name": st.sampled_from(OP_NAMES),
    "gap_us": st.integers(0, 30),
    "cpu_us": st.integers(1, 200),
    "launch_stream": st.sampled_from([None, 7, 20]),
    "launch_at": st.floats(0.0, 0.9),
    "kernel_us": st.integers(1, 400),
    "sync": st.sampled_from([None, None, None, "cudaDeviceSynchronize", "cudaStreamSynchronize", "item"]),
    # how far a kernel may start before its stream predecessor ends (recorded overlaps)
    "overlap_us": st.sampled_from([0, 0, 0, 3, 60]),
    "new_step": st.booleans(),
})


class StepSimulator:
    """Lays generated actions out in time the way a GIL-serialized PyTorch step runs."""

    def __init__(self, in_flight_us: int = 0):
        self.b = TraceBuilder(rank=0)
        self.lanes = {False: self.b.thread(100, "pt_main_thread"), True: self.b.thread(200, "pt_autograd_0")}
        self.clock = 0.0
        self.stream_free = {7: 0.0, 20: 0.0}
        if in_flight_us:  # launched before profiling began: its correlation points nowhere
            self.b.gpu_op("kernel_in_flight", 7, -5, in_flight_us, correlation=999_999)
            self.stream_free[7] = in_flight_us - 5
        self.steps = [0.0]

    def run(self, actions: list[dict]) -> TraceBuilder:
        for act in actions:
            if act["new_step"] and self.clock > self.steps[-1]:
                self.steps.append(self.clock)
            self._one(act)
        ends = self.steps[1:] + [self.clock + 1]
        for number, (start, end) in enumerate(zip(self.steps, ends), start=1):
            self.b.step(number, self.lanes[False], start, end - start)
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
        kernel_start = max(launch_start + 0.5 + 2, self.stream_free[stream] - act["overlap_us"])
        self.b.launch(lane, launch_start, 0.5, f"kernel_{act['name']}", stream, kernel_start, act["kernel_us"])
        self.stream_free[stream] = max(self.stream_free[stream], kernel_start + act["kernel_us"])

    def _sync(self, lane, call: str) -> None:
        if call == "item":
            return self._item(lane)
        waited = max(self.stream_free.values()) if call == "cudaDeviceSynchronize" else self.stream_free[7]
        end = max(self.clock + 1, waited + 1)
        self.b.runtime(lane, call, self.clock, end - self.clock)
        self.clock = end


    def _item(self, lane) -> None:
        """loss.item(): a copy into pageable memory blocks until stream 7 drains and the copy
        ran, then a short cudaStreamSynchronize."""
        start = self.clock
        copy_start = max(start + 3, self.stream_free[7])
        copy_end = copy_start + 2
        self.b.launch(lane, start + 1, copy_end + 1 - (start + 1), "Memcpy DtoH (Device -> Pageable)", 7,
                      copy_start, 2, cat="gpu_memcpy", call="cudaMemcpyAsync")
        self.b.runtime(lane, "cudaStreamSynchronize", copy_end + 2, 1)
        self.b.cpu_op(lane, "aten::item", start, copy_end + 4 - start)
        self.stream_free[7] = copy_end
        self.clock = copy_end + 4
