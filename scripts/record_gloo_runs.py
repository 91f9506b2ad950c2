"""Record real 2-rank CPU training runs for the cross-rank tests (tests/data/gloo/).

    /work/torch-venv/bin/python scripts/record_gloo_runs.py [--out tests/data/gloo]

Two ranks are spawned with torch.multiprocessing on the gloo backend over 127.0.0.1. Each
trains a small MLP wrapped in DistributedDataParallel (small buckets, so every step has a
few all-reduces) under torch.profiler with ProfilerStep annotations. Two runs:

- `balanced/`: both ranks do the same work;
- `straggler/`: rank 1 sleeps SLOW_MS per step inside `record_function("slow_rank")` before
  its forward, so rank 0 waits for it in every all-reduce.

Each run folder gets `rank-0.json.gz` and `rank-1.json.gz`.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from trace_files import gzip_trace  # scripts/trace_files.py: the trace says its own name

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "gloo"
WORLD_SIZE = 2
SLOW_RANK = 1
SLOW_MS = 15.0
FEATURES = 256
BATCH = 64
WAIT, WARMUP, ACTIVE = 1, 1, 4
STEPS = WAIT + WARMUP + ACTIVE + 1


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, 512), nn.ReLU(),
        nn.Linear(512, 512), nn.ReLU(),
        nn.Linear(512, 10),
    )


def train(rank: int, port: int, slow: bool, folder: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    torch.manual_seed(0)
    # buckets of ~0.5 MB: three all-reduces per step instead of one
    model = DistributedDataParallel(make_model(), bucket_cap_mb=0.5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(rank)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
                 record_shapes=True,
                 on_trace_ready=lambda prof: prof.export_chrome_trace(f"{folder}/rank-{rank}.json")) as prof:
        for _ in range(STEPS):
            inputs = torch.randn(BATCH, FEATURES, generator=generator)
            labels = torch.randint(0, 10, (BATCH,), generator=generator)
            if slow and rank == SLOW_RANK:
                with record_function("slow_rank"):
                    time.sleep(SLOW_MS / 1000)
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(inputs), labels).backward()
            optimizer.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def record_run(out: Path, slow: bool) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(train, args=(free_port(), slow, folder), nprocs=WORLD_SIZE, join=True)
        for rank in range(WORLD_SIZE):
            gzip_trace(Path(folder) / f"rank-{rank}.json", out / f"rank-{rank}.json.gz")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    for name, slow in (("balanced", False), ("straggler", True)):
        print(f"recorded {record_run(args.out / name, slow)}")


if __name__ == "__main__":
    main()
