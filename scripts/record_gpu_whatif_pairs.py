"""Record pairs of small real CUDA training traces with a known change between them, to
validate `ctda-sql whatif` on GPU work against measured truth (tests/whatif/test_whatif_pairs.py).

Run on a machine with a GPU (torch is never a project dependency):
    python3 scripts/record_gpu_whatif_pairs.py [--out tests/data/whatif]

Each step launches a GPU-bound MLP training step (fp32, ~8 ms of kernels on an H100), then
stalls the CPU in `record_function("data_loading")` (the next batch being prepared) while
the GPU works, then blocks on `loss.item()`. The stall overlaps the GPU work: removing it
saves only the part of it that outlasted the kernels, which a replay can only get right if it
follows the GPU stream behind the CPU's launches and the blocking copy.

Variants, 3 repetitions each, interleaved (5 profiled ProfilerSteps each):
  gpustall12 / gpustall6 / gpustall0   a 12, 6 or 0 ms stall after the launches

The async variants make no `.item()` call: the CPU runs ahead, and the GPU's queue sets the
pace (one step's work spills into the next step's window). Every variant synchronizes once
before its first profiled step, so no recording starts with a backlog of unprofiled work:
  gpuasync12 / gpuasync0               the same stalls, no sync in the step

Half the batch halves nearly every kernel (the GEMMs and elementwise ops scale with it; only
the optimizer's update does not), which `kernel:*=0.5` predicts from gpustall0:
  gpuhalf0                             gpustall0 with half the batch

The next batch is copied host-to-device on a side stream while the step computes; the next
step waits for it (`wait_stream`) at its start, so the copy crosses the step boundary. Halving
the bytes halves the copy, which `gpu_memcpy:*=0.5` predicts:
  gpucopy1024 / gpucopy512 / gpucopy256   a 1024, 512 or 256 MB copy per step

The same step under DDP over NCCL (world size 1): the gradient all-reduces overlap backward
on NCCL's stream. Half the batch halves the compute kernels, not the all-reduces
(`kernel:*=0.5`, then `kernel:nccl*=1`):
  gpuddp / gpuddphalf                  the whole batch, half the batch

A loader thread stalls, makes each batch in pinned memory and hands it over a queue; the
main thread copies it to the GPU, trains and calls `.item()`. Removing the stall
(`loader_stall=0`) turns the loader-bound step GPU-bound:
  gpuloader15 / gpuloader0             a 15 ms stall, none

The same step captured once in a CUDA graph and replayed (one cudaGraphLaunch for all its
kernels), then `.item()`; `kernel:*=0.5` against half the batch:
  gpugraph / gpugraphhalf              the whole batch, half the batch

No sync and 600 unprofiled steps first: the CPU has run so far ahead that the launch queue
is full, and every launch waits for a slot (the CPU keeps the GPU's pace inside
cudaLaunchKernel). Halving the kernels (`kernel:*=0.5`) against half the batch:
  gpuqueue / gpuqueuehalf              the whole batch, half the batch
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from record_whatif_pairs import record_interleaved, start_loader  # this folder's CPU recorder
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from trace_files import gzip_trace  # scripts/trace_files.py: the trace says its own name

WIDTH = 4096
BATCH = 2048
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def make_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH),
    ).to(DEVICE)
    return model, torch.optim.SGD(model.parameters(), lr=1e-4)


def train(model, optimizer, batch):
    """Forward, backward and the optimizer's step; the loss, still on the GPU."""
    loss = model(batch).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss


def training_step(stall_ms: float, sync: bool, batch_share: float = 1.0):
    model, optimizer = make_model()
    batch = torch.randn(int(BATCH * batch_share), WIDTH, device=DEVICE)

    def step():
        loss = train(model, optimizer, batch)
        with record_function("data_loading"):  # the CPU prepares the next batch meanwhile
            time.sleep(stall_ms / 1000)
        if sync:
            loss.item()
    return step


def prefetch_step(copy_mb: int):
    """Each step waits for its batch's host-to-device copy (made on a side stream during the
    previous step), starts the next batch's copy, then trains and calls `.item()`."""
    model, optimizer = make_model()
    batch = torch.randn(BATCH, WIDTH, device=DEVICE)
    copy_stream = torch.cuda.Stream() if DEVICE == "cuda" else None
    elements = copy_mb * 2**20 // 4
    hosts = [torch.ones(elements).pin_memory() if DEVICE == "cuda" else torch.ones(elements) for _ in range(2)]
    devices = [torch.empty(elements, device=DEVICE) for _ in range(2)]
    steps = [0]

    def step():
        index = steps[0]
        steps[0] += 1
        if copy_stream is not None:
            torch.cuda.current_stream().wait_stream(copy_stream)  # this step's batch has arrived
            with torch.cuda.stream(copy_stream), record_function("prefetch"):
                devices[(index + 1) % 2].copy_(hosts[(index + 1) % 2], non_blocking=True)
        loss = model(batch + devices[index % 2][:1].sum() * 0).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
    return step


def ddp_step(batch_share: float):
    """The training step under DistributedDataParallel over NCCL (world size 1): gradient
    buckets are all-reduced on NCCL's stream while backward runs; then `.item()`."""
    import os

    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29541")
        dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo", rank=0, world_size=1)
    model, _ = make_model()
    model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    batch = torch.randn(int(BATCH * batch_share), WIDTH, device=DEVICE)

    def step():
        train(model, optimizer, batch).item()
    return step


def loader_step(stall_ms: float):
    """A loader thread stalls, makes the next batch in pinned memory and puts it in a queue;
    the main thread takes it, copies it to the GPU, trains and calls `.item()`."""
    import itertools

    model, optimizer = make_model()
    source = torch.randn(BATCH, WIDTH)
    pool = [torch.empty(BATCH, WIDTH, pin_memory=DEVICE == "cuda") for _ in range(4)]
    made = itertools.count()
    # each batch a copy into the next pinned buffer (~3 ms)
    batches, finish = start_loader(stall_ms, lambda: pool[next(made) % len(pool)].copy_(source), maxsize=2)

    def step():
        batch = batches.get().to(DEVICE, non_blocking=True)
        train(model, optimizer, batch).item()
    step.finish = finish
    return step


def graph_step(batch_share: float):
    """The training step captured once in a CUDA graph and replayed, then `.item()`."""
    model, optimizer = make_model()
    static_in = torch.randn(int(BATCH * batch_share), WIDTH, device=DEVICE)
    if DEVICE != "cuda":  # a CPU smoke run has no graphs: the plain step
        return training_step(0, True, batch_share)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            model(static_in).pow(2).mean().backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = model(static_in).pow(2).mean()
        static_loss.backward()
        optimizer.step()

    def step():
        graph.replay()
        static_loss.item()
    return step


VARIANTS = {
    "gpustall12": lambda: training_step(12, True),
    "gpustall6": lambda: training_step(6, True),
    "gpustall0": lambda: training_step(0, True),
    "gpuasync12": lambda: training_step(12, False),
    "gpuasync0": lambda: training_step(0, False),
    "gpuhalf0": lambda: training_step(0, True, batch_share=0.5),
    "gpucopy1024": lambda: prefetch_step(1024),
    "gpucopy512": lambda: prefetch_step(512),
    "gpucopy256": lambda: prefetch_step(256),
    "gpuddp": lambda: ddp_step(1.0),
    "gpuddphalf": lambda: ddp_step(0.5),
    "gpuloader15": lambda: loader_step(15),
    "gpuloader0": lambda: loader_step(0),
    "gpugraph": lambda: graph_step(1.0),
    "gpugraphhalf": lambda: graph_step(0.5),
    "gpuqueue": lambda: training_step(0, False),
    "gpuqueuehalf": lambda: training_step(0, False, batch_share=0.5),
}
# variants profiled with the GPU's launch queue full: unprofiled steps first, no sync
QUEUE_FILL = {"gpuqueue": 600, "gpuqueuehalf": 600}


def synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def record(variant: str, out: Path) -> None:
    step = VARIANTS[variant]()
    for _ in range(5):  # warm up outside the profiler (cuBLAS handles, allocator)
        step()
    synchronize()
    for _ in range(QUEUE_FILL.get(variant, 0)):  # run ahead until the launch queue is full
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
    config = (torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
              if variant.startswith("gpuloader") else None)  # the loader thread's annotations
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=5),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
                     experimental_config=config) as prof:
            for index in range(7):
                step()
                if index == 1 and variant not in QUEUE_FILL:  # the profiled steps start with an idle GPU
                    synchronize()
                prof.step()
            synchronize()
        gzip_trace(raw, out)
    if hasattr(step, "finish"):  # a loader thread stops before the next variant
        step.finish()


def gpu_step_ms() -> float:
    """The kernels' time of one step, measured alone (to check the stalls straddle it)."""
    step = training_step(0, True)
    for _ in range(5):
        step()
    synchronize()
    started = time.perf_counter()
    for _ in range(20):
        step()
    synchronize()
    return (time.perf_counter() - started) / 20 * 1000


def main() -> None:
    global WIDTH, BATCH
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="tests/data/whatif", help="folder for the .json.gz traces")
    parser.add_argument("--only", nargs="*", choices=sorted(VARIANTS), help="record only these variants")
    parser.add_argument("--width", type=int, default=WIDTH, help="MLP width (smaller for a CPU smoke run)")
    args = parser.parse_args()
    WIDTH, BATCH = args.width, args.width // 2
    print(f"device {DEVICE}; one synced step without a stall: {gpu_step_ms():.2f} ms")
    if DEVICE == "cuda":  # the process's first profiler session starts CUPTI, which drains the GPU
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            synchronize()
    record_interleaved(Path(args.out), args.only or list(VARIANTS), record)


if __name__ == "__main__":
    main()
