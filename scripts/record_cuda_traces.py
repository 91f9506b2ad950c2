"""Record small real CUDA training traces for tests/data/cuda/ (run on a machine with a GPU).

    python scripts/record_cuda_traces.py --out tests/data/cuda

Each scenario trains a small model for a few profiled steps (schedule wait=1, warmup=1,
active=4) and writes one gzipped Kineto trace. Every scenario is recorded twice: as users
record (no GPU-side sync events), and with `enable_cuda_sync_events=True`, whose recorded
`cuda_sync` events are the ground truth the inferred edges are checked against.

Scenarios (what the critical path must get right on each):
- `item_sync`: `loss.item()` every step, a blocking device-to-host copy nested in
  `aten::item` / `aten::_local_scalar_dense`, plus a side stream that prefetches the next
  batch (host-to-device copy, `wait_stream`): a GPU-bound step whose path runs through the
  kernels the copy waited for.
- `ddp_nccl`: DistributedDataParallel over NCCL (world size 1 on one GPU, plus an explicit
  all_reduce of a metric): NCCL kernels on their own stream, hand-offs to the compute stream.
- `cuda_graph`: a forward+backward captured once in a CUDA graph and replayed every step
  (`cudaGraphLaunch`, one correlation id for many kernels).

The small model (width 1024) makes launch-bound steps, as small models on fast GPUs are;
`--big` records `item_sync` and `ddp_nccl` with width 4096 and batch 2048 as `*_big`: GPU-bound
steps whose path must run through the kernels the syncs waited for.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
from trace_files import gzip_trace  # scripts/trace_files.py: the trace says its own name

STEPS = 1 + 1 + 4 + 1
WIDTH = 1024
BATCH = 256


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(WIDTH, WIDTH * 2), nn.GELU(),
        nn.Linear(WIDTH * 2, WIDTH * 2), nn.GELU(),
        nn.Linear(WIDTH * 2, WIDTH), nn.GELU(),
        nn.Linear(WIDTH, 16),
    ).cuda()


def profiled(out: Path, sync_events: bool):
    config = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True) if sync_events else None
    folder = Path(tempfile.mkdtemp())

    def on_ready(prof):
        raw = folder / "trace.json"
        prof.export_chrome_trace(str(raw))
        gzip_trace(raw, out)

    kwargs = dict(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                  schedule=schedule(wait=1, warmup=1, active=STEPS - 3, repeat=1),
                  on_trace_ready=on_ready, record_shapes=True)
    if config is not None:
        kwargs["experimental_config"] = config
    return profile(**kwargs)


def item_sync(out: Path, sync_events: bool) -> None:
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    copy_stream = torch.cuda.Stream()
    host_batches = [torch.randn(BATCH, WIDTH).pin_memory() for _ in range(2)]
    targets = torch.randint(0, 16, (BATCH,), device="cuda")
    with profiled(out, sync_events) as prof:
        with torch.cuda.stream(copy_stream):
            batch = host_batches[0].cuda(non_blocking=True)
        for step in range(STEPS):
            torch.cuda.current_stream().wait_stream(copy_stream)
            current = batch
            current.record_stream(torch.cuda.current_stream())
            with torch.cuda.stream(copy_stream):  # prefetch the next batch on a side stream
                batch = host_batches[(step + 1) % 2].cuda(non_blocking=True)
            for _ in range(3):
                loss = nn.functional.cross_entropy(model(current), targets)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            print(f"step {step} loss {loss.item():.4f}")  # blocking D2H copy every step
            prof.step()


def ddp_nccl(out: Path, sync_events: bool) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(29511 + sync_events)  # a fresh port per recording
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        model = nn.parallel.DistributedDataParallel(make_model(), device_ids=[0], bucket_cap_mb=4)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        inputs = torch.randn(BATCH * 2, WIDTH, device="cuda")
        targets = torch.randint(0, 16, (BATCH * 2,), device="cuda")
        with profiled(out, sync_events) as prof:
            for _ in range(STEPS):
                loss = nn.functional.cross_entropy(model(inputs), targets)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                metric = loss.detach().clone()
                dist.all_reduce(metric)
                metric.item()
                prof.step()
    finally:
        dist.destroy_process_group()


def cuda_graph(out: Path, sync_events: bool) -> None:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    static_in = torch.randn(256, WIDTH, device="cuda")
    static_target = torch.randint(0, 16, (256,), device="cuda")
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(static_in), static_target).backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = nn.functional.cross_entropy(model(static_in), static_target)
        static_loss.backward()
        optimizer.step()
    with profiled(out, sync_events) as prof:
        for _ in range(STEPS):
            static_in.copy_(torch.randn(256, WIDTH, device="cuda"))
            graph.replay()
            static_loss.item()
            prof.step()


SCENARIOS = {"item_sync": item_sync, "ddp_nccl": ddp_nccl, "cuda_graph": cuda_graph}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/data/cuda"))
    parser.add_argument("--only", choices=sorted(SCENARIOS))
    parser.add_argument("--big", action="store_true", help="GPU-bound item_sync and ddp_nccl (*_big)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    global WIDTH, BATCH
    if args.big:
        WIDTH, BATCH = 4096, 2048
    for name, record in SCENARIOS.items():
        if (args.only and name != args.only) or (args.big and name == "cuda_graph"):
            continue
        for sync_events in (False, True):
            suffix = ("_big" if args.big else "") + ("_syncevents" if sync_events else "")
            target = args.out / f"{name}{suffix}.json.gz"
            record(target, sync_events)
            torch.cuda.synchronize()
            print(f"wrote {target} ({target.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
