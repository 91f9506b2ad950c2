"""Hand-made traces of one job: the method paper's figures 1 and 2 (tests/engine/test_engine_figures.py
derives their answers), figure 1 as two ranks, a two-step training step, and a trace big enough
to interrupt."""

from __future__ import annotations

from pathlib import Path

from ctda_sql.testing.tracebuilder import TraceBuilder


def figure1_trace() -> TraceBuilder:
    """Forward on the main thread, backward on the autograd thread with a gradient all-reduce
    launched from backward, then the optimizer after a device sync."""
    b = TraceBuilder(rank=0)
    main, autograd = b.thread(100, "pt_main_thread"), b.thread(200, "pt_autograd_0")
    b.step(1, main, 0, 1000)
    b.cpu_op(main, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 100)
    b.cpu_op(main, "aten::linear", 100, 200)
    b.launch(main, 110, 5, "fwd_gemm", stream=7, kernel_ts=120, kernel_dur=160)
    b.cpu_op(main, "aten::mse_loss", 300, 50)
    b.cpu_op(autograd, "autograd::engine::evaluate_function: AddmmBackward0", 360, 140)
    b.launch(autograd, 370, 5, "bwd_gemm", stream=7, kernel_ts=380, kernel_dur=220)
    b.cpu_op(autograd, "record_param_comms", 510, 20)
    b.launch(autograd, 515, 5, "ncclDevKernel_AllReduce", stream=20, kernel_ts=525, kernel_dur=375)
    b.runtime(main, "cudaDeviceSynchronize", 540, 365)
    b.annotation(main, "Optimizer.step#SGD.step", 910, 90)
    b.cpu_op(main, "aten::add_", 910, 90)
    b.launch(main, 920, 5, "sgd_update", stream=7, kernel_ts=1005, kernel_dur=45)
    return b


def figure2_trace() -> TraceBuilder:
    """The longest kernel runs fully hidden behind long CPU work."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 760)
    b.cpu_op(main, "aten::conv2d", 0, 50)
    b.launch(main, 10, 5, "long_conv_kernel", stream=7, kernel_ts=60, kernel_dur=440)
    b.cpu_op(main, "aten::cpu_heavy_preprocess", 50, 650)
    b.cpu_op(main, "aten::relu", 700, 20)
    b.launch(main, 705, 10, "short_relu_kernel", stream=7, kernel_ts=730, kernel_dur=30)
    return b


def two_rank_folder(folder: Path) -> Path:
    """figure 1 as ranks 0 and 1 of one job: same pids, tids and flow ids in both files."""
    folder.mkdir()
    for rank in (0, 1):
        builder = figure1_trace()
        builder.rank, builder.world_size = rank, 2
        builder.events.append({"name": "process_name", "ph": "M", "ts": builder.base_ts,
                               "pid": builder.pid, "tid": 0, "args": {"name": "python"}})
        builder.events += [
            {"name": "fwdbwd", "cat": "fwdbwd", "ph": "s", "id": 7, "pid": builder.pid, "tid": 100,
             "ts": builder.base_ts + 150},
            {"name": "fwdbwd", "cat": "fwdbwd", "ph": "f", "bp": "e", "id": 7, "pid": builder.pid,
             "tid": 200, "ts": builder.base_ts + 400},
        ]
        builder.write(folder / f"rank-{rank}.json")
    return folder


def training_trace(rank: int, world_size: int, slow: float = 0.0, shift: float = 0.0) -> TraceBuilder:
    """Two steps: forward on the main thread, backward on the autograd thread, a sync; each
    step starts `shift` us later (so ranks of a job need not end their steps together)."""
    builder = TraceBuilder(rank=rank, world_size=world_size)
    main, autograd = builder.thread(100, "pt_main_thread"), builder.thread(200, "pt_autograd_0")
    for number, start in ((1, 0.0 + shift), (2, 1000.0 + 2 * shift)):
        builder.step(number, main, ts=start, dur=900 + slow)
        builder.cpu_op(main, "aten::linear", ts=start + 10, dur=100)
        builder.launch(main, ts=start + 20, dur=10, kernel="gemm_kernel", stream=7,
                       kernel_ts=start + 40, kernel_dur=200 + slow)
        builder.cpu_op(autograd, "autograd::engine::evaluate_function: AddmmBackward0", ts=start + 300, dur=200)
        builder.launch(autograd, ts=start + 310, dur=10, kernel="gemm_backward", stream=7,
                       kernel_ts=start + 330, kernel_dur=150)
        builder.launch(main, ts=start + 520, dur=10, kernel="ncclKernel_AllReduce_RING_LL_Sum_float",
                       stream=20, kernel_ts=start + 540, kernel_dur=100)
        builder.runtime(main, "cudaDeviceSynchronize", ts=start + 600, dur=60)
        builder.cpu_op(main, "Optimizer.step#SGD.step", ts=start + 700, dur=150)
    return builder


def busy_trace(path: Path, steps: int = 40, ops: int = 400) -> Path:
    """A trace big enough that ingest and analyze take a noticeable time (~30k events)."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.stream(7)
    ts = 0.0
    for step in range(1, steps + 1):
        b.step(step, main, ts=ts, dur=ops * 10)
        for op in range(ops):
            at = ts + op * 10
            b.cpu_op(main, f"aten::op{op % 17}", ts=at, dur=8)
            if op % 2 == 0:
                b.launch(main, ts=at + 1, dur=3, kernel=f"k{op % 5}", stream=7,
                         kernel_ts=at + 5, kernel_dur=7)
        ts += ops * 10 + 50
    return b.write(path)
