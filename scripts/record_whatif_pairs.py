"""Record pairs of small real CPU PyTorch training traces with a known change between them,
to validate `ctda-sql whatif` against measured truth (tests/whatif/test_whatif_pairs.py).

Run with a Python that has torch (never a project dependency):
    /work/torch-venv/bin/python scripts/record_whatif_pairs.py [--out tests/data/whatif]

The committed traces were recorded on an idle 16-core machine (torch 2.11, CPU activities
only) pinned to two cores: `taskset -c 2,3 python3 scripts/record_whatif_pairs.py`; on a busy
machine the run-to-run spread grows past the effects being measured.

Each variant is recorded 3 times (run-to-run noise), 5 profiled ProfilerSteps each:
  stall20 / stall10 / stall0   a data-loading stall of 20, 10, 0 ms in record_function("data_loading")
  compute200 / compute100      a compute region of N and N/2 matmuls in record_function("compute")
  loader15 / loader0           a background loader thread (15 ms stall, or none) feeding the main
                               thread through a queue while it computes
"""

from __future__ import annotations

import argparse
import queue
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from trace_files import gzip_trace  # scripts/trace_files.py: the trace says its own name

REPETITIONS = 3
FEATURES = 256


def make_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 512), torch.nn.ReLU(), torch.nn.Linear(512, FEATURES))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(model, optimizer, batch):
    loss = model(batch).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def compute(iterations: int):
    a = torch.randn(128, 128)
    with record_function("compute"):
        for _ in range(iterations):
            a = torch.mm(a, a).tanh_()


def stall_step(stall_ms: float):
    model, optimizer = make_model()

    def step():
        with record_function("data_loading"):
            time.sleep(stall_ms / 1000)
        batch = torch.randn(64, FEATURES)
        compute(40)
        train_step(model, optimizer, batch)
    return step, None


def compute_step(iterations: int):
    model, optimizer = make_model()

    def step():
        compute(iterations)
        train_step(model, optimizer, torch.randn(64, FEATURES))
    return step, None


def start_loader(stall_ms: float, make_batch, maxsize: int = 1):
    """A thread that stalls in record_function("loader_stall"), makes a batch in
    record_function("make_batch") and puts it in a queue, until stopped: (queue, stop)."""
    batches: queue.Queue = queue.Queue(maxsize=maxsize)
    stop = threading.Event()

    def loader():
        while not stop.is_set():
            with record_function("loader_stall"):
                time.sleep(stall_ms / 1000)
            with record_function("make_batch"):
                batch = make_batch()
            while not stop.is_set():
                try:
                    batches.put(batch, timeout=0.05)
                    break
                except queue.Full:
                    continue

    thread = threading.Thread(target=loader, name="loader", daemon=True)
    thread.start()
    return batches, lambda: (stop.set(), thread.join())


def loader_step(stall_ms: float):
    """The loader stalls, then makes a batch and puts it; the main thread computes meanwhile."""
    model, optimizer = make_model()
    batches, finish = start_loader(stall_ms, lambda: torch.randn(64, FEATURES) * 2)

    def step():
        compute(100)
        batch = batches.get()
        train_step(model, optimizer, batch)
    return step, finish


VARIANTS = {
    "stall20": lambda: stall_step(20), "stall10": lambda: stall_step(10), "stall0": lambda: stall_step(0),
    "compute200": lambda: compute_step(200), "compute100": lambda: compute_step(100),
    "loader15": lambda: loader_step(15), "loader0": lambda: loader_step(0),
}


def record(variant: str, out: Path) -> None:
    step, finish = VARIANTS[variant]()
    for _ in range(3):  # warm up outside the profiler
        step()
    config = (torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
              if variant.startswith("loader") else None)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=5),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
                     experimental_config=config) as prof:
            for _ in range(7):
                step()
                prof.step()
        gzip_trace(raw, out)
    if finish:
        finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="tests/data/whatif", help="folder for the .json.gz traces")
    parser.add_argument("--only", nargs="*", choices=sorted(VARIANTS), help="record only these variants")
    args = parser.parse_args()
    torch.set_num_threads(1)
    record_interleaved(Path(args.out), args.only or list(VARIANTS), record)


def record_interleaved(out: Path, variants: list[str], record_one) -> None:
    """REPETITIONS recordings of every variant, as out/VARIANT-rN.json.gz."""
    out.mkdir(parents=True, exist_ok=True)
    for repetition in range(1, REPETITIONS + 1):  # interleaved, so drift hits every variant alike
        for variant in variants:
            path = out / f"{variant}-r{repetition}.json.gz"
            record_one(variant, path)
            print(f"{path}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
