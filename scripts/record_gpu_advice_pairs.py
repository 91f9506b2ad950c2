"""Record before/after pairs of small real CUDA training traces, one pair per GPU-only rule of
`ctda-sql advise` (tests/advice/test_advice.py, docs/advice.md): the "before" variant shows the
pattern the rule finds, the "after" variant has the rule's fix applied for real.

Run on a machine with a GPU (torch is never a project dependency):
    python3 scripts/record_gpu_advice_pairs.py [--out tests/data/advice]

Each variant is recorded 3 times, interleaved (run-to-run noise), 5 profiled ProfilerSteps:
  pageable / pinned      each step copies its 256 MB batch host-to-device from pageable memory
                         (the copy blocks the CPU), or from pinned memory with non_blocking=True
                         (the CPU goes on launching while the copy runs)
  launchbound / graphed  a step of 400 tiny elementwise kernels on a 4096-float tensor: the GPU
                         idles between them while the CPU launches each; the same step captured
                         once in a CUDA graph and replayed (one launch)
  hostsync / nosync      an MLP training step of 8 micro-batches (~3 ms of kernels each, then 2 ms
                         of the CPU's own work in record_function("host_work")) that calls
                         `.item()` on each micro-batch's loss (the CPU waits for the GPU 8 times
                         and its work cannot overlap the kernels), or once at the end
  foreach / fused        Adam over 200 small parameter tensors, `foreach=False` (a loop of
                         kernels per tensor), or `fused=True`
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, str(Path(__file__).parent))
from trace_files import gzip_trace  # noqa: E402  (scripts/trace_files.py)

DEVICE = "cuda"
REPETITIONS = 3
ACTIVE_STEPS = 5


def copy_step(pinned: bool):
    elements = 256 * 2**20 // 4
    host = torch.ones(elements).pin_memory() if pinned else torch.ones(elements)
    weight = torch.randn(2048, 2048, device=DEVICE)
    work = torch.randn(2048, 2048, device=DEVICE)

    def step():
        batch = host.to(DEVICE, non_blocking=pinned)
        out = work
        for _ in range(20):
            out = torch.mm(out, weight).tanh_()
        (out.sum() + batch[:1].sum()).item()
    return step


def tiny_kernels(x):
    for _ in range(100):
        x = x.mul(1.0001).add_(0.0001).neg_().neg_()
    return x


def launch_step(graphed: bool):
    static_in = torch.randn(4096, device=DEVICE)
    if not graphed:
        def step():
            tiny_kernels(static_in).sum().item()
        return step
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            tiny_kernels(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = tiny_kernels(static_in).sum()

    def step():
        graph.replay()
        static_out.item()
    return step


def sync_step(every_micro_batch: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 2048)).to(DEVICE)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    batches = [torch.randn(4096, 2048, device=DEVICE) for _ in range(8)]

    def step():
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=DEVICE)
        for batch in batches:
            loss = model(batch).pow(2).mean()
            loss.backward()
            if every_micro_batch:
                loss.item()  # logging each micro-batch's loss: the CPU waits for the GPU
            total = total + loss.detach()
            with record_function("host_work"):  # the CPU's own work per micro-batch (2 ms)
                time.sleep(0.002)
        optimizer.step()
        total.item()
    return step


def optimizer_step(fused: bool):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(64, 64, device=DEVICE)) for _ in range(200)]
    optimizer = (torch.optim.Adam(params, lr=1e-4, fused=True) if fused
                 else torch.optim.Adam(params, lr=1e-4, foreach=False))
    for p in params:
        p.grad = torch.randn_like(p)

    def step():
        optimizer.step()
        params[0].sum().item()
    return step


VARIANTS = {
    "pageable": lambda: copy_step(False), "pinned": lambda: copy_step(True),
    "launchbound": lambda: launch_step(False), "graphed": lambda: launch_step(True),
    "hostsync": lambda: sync_step(True), "nosync": lambda: sync_step(False),
    "foreach": lambda: optimizer_step(False), "fused": lambda: optimizer_step(True),
}


def record(variant: str, out: Path) -> None:
    step = VARIANTS[variant]()
    for _ in range(5):  # warm up outside the profiler (cuBLAS handles, allocator, graphs)
        step()
    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=1, warmup=1, active=ACTIVE_STEPS),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
            for _ in range(2 + ACTIVE_STEPS):
                step()
                prof.step()
            torch.cuda.synchronize()
        gzip_trace(raw, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="tests/data/advice", help="folder for the .json.gz traces")
    parser.add_argument("--only", nargs="*", choices=sorted(VARIANTS), help="record only these variants")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        torch.cuda.synchronize()  # the first profiler session starts CUPTI, which drains the GPU
    for repetition in range(1, REPETITIONS + 1):  # interleaved: drift spreads over every variant
        for variant in args.only or list(VARIANTS):
            path = out / f"{variant}-r{repetition}.json.gz"
            record(variant, path)
            print(f"{path}: {path.stat().st_size / 1e6:.2f} MB", flush=True)


if __name__ == "__main__":
    main()
