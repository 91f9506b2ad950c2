"""Record real 2-rank CPU runs of sharded and pipeline parallelism for the cross-rank tests
(tests/data/gloo/).

    /work/torchenv/bin/python scripts/record_gloo_parallel.py [--out tests/data/gloo] [--only NAME] [--repeat K]

The what-if pairs of tests/whatif/test_whatif_parallel.py were recorded on an idle machine with
`--out tests/data/gloo_pairs --only pipeline --only pipeline_slow --repeat 3 --active 10`.

Two ranks are spawned with torch.multiprocessing on the gloo backend over 127.0.0.1, with
one intra-op thread each, under torch.profiler with ProfilerStep annotations (CPU only).
Three runs:

- `fsdp/`: an MLP sharded with FSDP2 (`fully_shard`) on both ranks, with explicit forward
  and backward prefetching: per step an all-gather per layer (twice: forward and backward)
  and a reduce-scatter per layer;
- `pipeline/`: a 2-stage pipeline (`torch.distributed.pipelining`, `Schedule1F1B`,
  MICROBATCHES microbatches): rank 0 runs the first half of an MLP, rank 1 the second half
  and the loss; activations and gradients travel by point-to-point send/recv;
- `pipeline_slow/`: the same pipeline, with stage 1 made slow on purpose: it sleeps SLOW_MS
  inside `record_function("slow_stage")` in each microbatch's forward.

Each run folder gets `rank-0.json.gz` and `rank-1.json.gz`, whose traceName is the file's own
name.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "gloo"
WORLD_SIZE = 2
FEATURES = 256
HIDDEN = 256
BATCH = 32
MICROBATCHES = 4
SLOW_STAGE = 1
SLOW_MS = 5.0
WAIT, WARMUP, ACTIVE = 1, 1, 3
RUNS = ("fsdp", "pipeline", "pipeline_slow")


class SlowStage(nn.Module):
    """Wraps a stage's module: sleeps SLOW_MS in a named annotation before each forward."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        with record_function("slow_stage"):
            time.sleep(SLOW_MS / 1000)
        return self.inner(x)


def fsdp_step(rank: int):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    layers = [nn.Linear(FEATURES if i == 0 else HIDDEN, HIDDEN) for i in range(3)]
    model = nn.Sequential(layers[0], nn.ReLU(), layers[1], nn.ReLU(), layers[2], nn.Linear(HIDDEN, 10))
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    # explicit prefetching: each layer's forward prefetches the next one's all-gather, each
    # backward the previous one's
    for current, following in zip(layers, layers[1:]):
        current.set_modules_to_forward_prefetch([following])
        following.set_modules_to_backward_prefetch([current])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(rank)

    def step():
        inputs = torch.randn(BATCH, FEATURES, generator=generator)
        labels = torch.randint(0, 10, (BATCH,), generator=generator)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(inputs), labels).backward()
        optimizer.step()
    return step


def pipeline_step(rank: int, slow: bool):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    torch.manual_seed(0)
    if rank == 0:
        module = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
    else:
        module = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))
        if slow and rank == SLOW_STAGE:
            module = SlowStage(module)
    # shapes given up front, so the stages exchange no metadata (pickled objects) by P2P
    micro = BATCH // MICROBATCHES
    activation = torch.empty(micro, HIDDEN)
    if rank == 0:
        shapes = dict(input_args=torch.empty(micro, FEATURES), output_args=activation,
                      output_grads=activation, input_grads=(None,))
    else:
        shapes = dict(input_args=activation, output_args=torch.empty(micro, 10),
                      output_grads=(None,), input_grads=activation)
    # every stage gets the loss function: a schedule without one runs no backward on that stage
    stage = PipelineStage(module, rank, WORLD_SIZE, torch.device("cpu"), **shapes)
    loss_fn = nn.CrossEntropyLoss()
    schedule_ = Schedule1F1B(stage, n_microbatches=MICROBATCHES, loss_fn=loss_fn)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(0)

    def step():
        inputs = torch.randn(BATCH, FEATURES, generator=generator)
        labels = torch.randint(0, 10, (BATCH,), generator=generator)
        optimizer.zero_grad(set_to_none=True)
        if rank == 0:
            schedule_.step(inputs)
        else:
            schedule_.step(target=labels, losses=[])
        optimizer.step()
    return step


def train(rank: int, port: int, run: str, folder: str, active: int = ACTIVE) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    step = fsdp_step(rank) if run == "fsdp" else pipeline_step(rank, slow=run == "pipeline_slow")
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=active, repeat=1),
                 record_shapes=True,
                 on_trace_ready=lambda prof: prof.export_chrome_trace(f"{folder}/rank-{rank}.json")) as prof:
        for _ in range(WAIT + WARMUP + active + 1):
            step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def record_run(out: Path, run: str, active: int = ACTIVE) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(train, args=(free_port(), run, folder, active), nprocs=WORLD_SIZE, join=True)
        for rank in range(WORLD_SIZE):
            name = f"rank-{rank}.json.gz"
            with open(f"{folder}/rank-{rank}.json") as src:
                trace = json.load(src)
            # the exporter writes its temporary path; the file's own name is what a reader sees
            trace["traceName"] = name
            with gzip.open(out / name, "wt") as dst:
                json.dump(trace, dst, separators=(",", ":"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", choices=RUNS, action="append", help="record only this run (repeatable)")
    parser.add_argument("--repeat", type=int, default=0, metavar="K",
                        help="record each run K times, into RUN-1 .. RUN-K (what-if pairs: the spread of "
                             "the repetitions is the noise a prediction is judged against)")
    parser.add_argument("--active", type=int, default=ACTIVE, metavar="N", help=f"steps profiled (default {ACTIVE})")
    args = parser.parse_args()
    for run in args.only or RUNS:
        folders = [run] if args.repeat < 1 else [f"{run}-{k}" for k in range(1, args.repeat + 1)]
        for folder in folders:
            print(f"recorded {record_run(args.out / folder, run, args.active)}")


if __name__ == "__main__":
    main()
