"""Record small real CUDA traces of sharded, pipelined and compiled training for
tests/data/cuda/parallel/ (run on a machine with one GPU; `--device cpu` runs the same code
on CPU with gloo, a dry run for the script, whose traces are not committed).

    python scripts/record_cuda_parallel.py [--out tests/data/cuda/parallel] [--only NAME]... [--device cuda|cpu]

Every run trains a small Transformer-like MLP stack (blocks of LayerNorm, Linear, GELU,
Linear with a residual) under torch.profiler, schedule wait=1, warmup=1, active=ACTIVE, with
ProfilerStep annotations and record_shapes off (but see `pipeline`), and logs the loss with
`loss.item()` every step, as training loops do. Runs:

- `fsdp/`: FSDP2 (`fully_shard` per block and at the root, explicit forward and backward
  prefetching) on two ranks over NCCL. One GPU holds both ranks: NCCL refuses two ranks on
  one GPU of one host, so each rank names a host of its own (NCCL_HOSTID) and NCCL connects
  them over sockets on the loopback interface. Per step an all-gather per block in forward
  and again in backward, a reduce-scatter per block, on FSDP's own streams. FSDP2 at world
  size 1 runs no collective at all (it copies instead), hence two ranks. If the two-rank
  NCCL start fails, the run falls back to one rank (`fsdp/rank-0.json.gz` alone, no NCCL).
- `bf16_compile.json.gz`: the stack under `torch.autocast(dtype=torch.bfloat16)` and
  `torch.compile` (default mode: Triton kernels, no CUDA graphs), AdamW; the compilation
  runs in WARMUP_COMPILE steps before the profiler starts, so the trace holds the compiled
  graphs' runs (CompiledFunction, Triton kernels), not the compile.
- `bf16_eager.json.gz`: the same model and batch under bf16 autocast, eager.
- `pipeline/`: a 2-stage GPipe pipeline, two processes on the one GPU (rank 0 the first
  half of the stack, rank 1 the second half and the loss), MICROBATCHES micro-batches per
  step: rank 0 runs every forward, sending each activation, then every backward as the
  gradients come back; rank 1 receives each activation, runs forward and loss, then
  backward in reverse order, sending each input gradient. The tensors travel by blocking
  `dist.send` / `dist.recv` over gloo, staged through the host (`.cpu()` before the send,
  `.to(device)` after the recv). Recorded with record_shapes on: the peer of a send/recv is
  in its call's Concrete Inputs only then, and cross-rank matching pairs them by channel.
- `pipeline_nccl/`: the same pipeline, schedule and model over NCCL point-to-point: the CUDA
  tensors go straight from one process's GPU memory to the other's by `dist.send` /
  `dist.recv` (no host staging), each a c10d::send / c10d::recv_ call that launches an NCCL
  send or recv kernel on the NCCL stream; `dist.send` and `dist.recv` block the CPU only
  until the kernel is queued (the current stream then waits on the NCCL stream), so rank 0,
  which never synchronizes, runs ahead of its GPU. Each blocking call also waits on its
  Work, which writes a record_param_comms 'wait' of its own. The two processes share the
  one GPU as `fsdp`'s ranks do (a host each for NCCL, sockets over loopback) and one NCCL
  communicator, so the sends and recvs of a rank run in order on one NCCL stream.
  record_shapes on, as in `pipeline`.

Each trace's traceName is its file's own name (scripts/trace_files.py); multi-rank runs
write `rank-0.json.gz` and `rank-1.json.gz` into their folder (the rank is also in the
trace's distributedInfo). The committed traces were recorded on one H100 with torch
2.11.0+cu130 and NCCL 2.28.9 (all runs in 69 s), but `pipeline_nccl` on one H200 with the
same torch and NCCL (13 s); tests/engine/test_engine_cuda_parallel.py reads them.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_files import gzip_trace  # noqa: E402  scripts/trace_files.py: the trace says its own name

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "cuda" / "parallel"
WAIT, WARMUP, ACTIVE = 1, 1, 3
STEPS = WAIT + WARMUP + ACTIVE + 1
WARMUP_COMPILE = 3
MICROBATCHES = 4
RUNS = ("fsdp", "bf16_compile", "bf16_eager", "pipeline", "pipeline_nccl")

# sizes per device: (width, blocks, tokens per batch); the CPU dry run stays tiny
SIZES = {
    "cuda": {"fsdp": (512, 4, 2048), "bf16": (1024, 4, 16384), "pipeline": (512, 4, 4096)},
    "cpu": {"fsdp": (64, 4, 64), "bf16": (64, 2, 64), "pipeline": (64, 4, 64)},
}
CLASSES = 16


class Block(nn.Module):
    """A Transformer block's MLP half: x + W2 gelu(W1 layernorm(x))."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def stack(width: int, blocks: int, head: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [Block(width) for _ in range(blocks)]
    if head:
        layers += [nn.LayerNorm(width), nn.Linear(width, CLASSES)]
    return nn.Sequential(*layers)


def profiler(device: str, target: Path, record_shapes: bool = False) -> profile:
    """The profiler of every run: writes `target` (gzipped, named after itself) when done."""
    folder = Path(tempfile.mkdtemp())

    def on_ready(prof):
        raw = folder / "trace.json"
        prof.export_chrome_trace(str(raw))
        gzip_trace(raw, target)
        raw.unlink()

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    return profile(activities=activities, schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
                   on_trace_ready=on_ready, record_shapes=record_shapes)


def batch(device: str, width: int, tokens: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(tokens, width, generator=generator).to(device)
    targets = torch.randint(0, CLASSES, (tokens,), generator=generator).to(device)
    return inputs, targets


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_group(device: str, backend: str, rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device == "cuda":
        torch.cuda.set_device(0)
    else:
        torch.set_num_threads(1)
    kwargs = {}
    if backend == "nccl":
        kwargs["device_id"] = torch.device("cuda", 0)  # start the communicator now, not at the first collective
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=60), **kwargs)


def share_one_gpu(name: str, rank: int) -> None:
    """One GPU, two ranks: NCCL refuses two ranks on one GPU of one host, so each rank names a
    host of its own and NCCL joins them by its socket transport over loopback."""
    os.environ.update(NCCL_HOSTID=f"ctda-{name}-rank{rank}", NCCL_SOCKET_IFNAME="lo", NCCL_IB_DISABLE="1",
                      NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1")


# ---- fsdp ----------------------------------------------------------------------------------

def fsdp_rank(rank: int, world: int, port: int, device: str, out: str) -> None:
    if device == "cuda" and world > 1:
        share_one_gpu("fsdp", rank)
    init_group(device, "nccl" if device == "cuda" else "gloo", rank, world, port)
    try:
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # before FSDP2 was public
            from torch.distributed._composable.fsdp import fully_shard
        width, blocks, tokens = SIZES[device]["fsdp"]
        torch.manual_seed(0)
        model = stack(width, blocks).to(device)
        for block in model[:blocks]:
            fully_shard(block)
        fully_shard(model)
        for current, following in zip(model[:blocks], model[1:blocks]):
            current.set_modules_to_forward_prefetch([following])
            following.set_modules_to_backward_prefetch([current])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        inputs, targets = batch(device, width, tokens, seed=rank)
        with profiler(device, Path(out) / f"rank-{rank}.json.gz") as prof:
            for step in range(STEPS):
                optimizer.zero_grad(set_to_none=True)
                loss = nn.functional.cross_entropy(model(inputs), targets)
                loss.backward()
                optimizer.step()
                print(f"fsdp rank {rank} step {step} loss {loss.item():.4f}")
                prof.step()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn(fn, args: tuple, world: int, limit_s: float) -> None:
    """Run fn(rank, *args) on `world` processes; raise if one fails or all outlast limit_s."""
    context = mp.start_processes(fn, args=args, nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + limit_s
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
            raise TimeoutError(f"{fn.__name__} outlasted {limit_s:.0f} s")


def record_fsdp(out: Path, device: str) -> None:
    folder = out / "fsdp"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        spawn(fsdp_rank, (2, free_port(), device, str(folder)), world=2, limit_s=100)
    except Exception:  # noqa: BLE001  the two-rank NCCL start is the fragile part: say why, go on with one
        traceback.print_exc()
        if device != "cuda":
            raise
        print("fsdp: two ranks failed; recording world size 1 (FSDP2 runs no collective there)")
        for stale in folder.glob("rank-*.json.gz"):
            stale.unlink()
        spawn(fsdp_rank, (1, free_port(), device, str(folder)), world=1, limit_s=90)


# ---- bf16 autocast, compiled and eager -------------------------------------------------------

def record_bf16(out: Path, device: str, compiled: bool) -> None:
    width, blocks, tokens = SIZES[device]["bf16"]
    torch.manual_seed(0)
    model = stack(width, blocks).to(device)
    run = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = batch(device, width, tokens, seed=0)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(run(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    started = time.monotonic()
    for _ in range(WARMUP_COMPILE):  # compiles forward and backward (or warms eager's kernels)
        step().item()
    print(f"{'compile' if compiled else 'eager'} warmup {time.monotonic() - started:.1f} s")
    name = "bf16_compile" if compiled else "bf16_eager"
    with profiler(device, out / f"{name}.json.gz") as prof:
        for index in range(STEPS):
            print(f"{name} step {index} loss {step().item():.4f}")
            prof.step()


# ---- pipeline --------------------------------------------------------------------------------

def pipeline_rank(rank: int, port: int, device: str, out: str, nccl: bool = False) -> None:
    """A pipeline stage: over gloo staged through the host, or (`nccl`) over NCCL point-to-point
    with the CUDA tensors sent as they are (on CPU, the dry run, gloo stands in for NCCL)."""
    direct = nccl and device == "cuda"
    if direct:
        share_one_gpu("pipeline", rank)
    init_group(device, "nccl" if direct else "gloo", rank, 2, port)
    try:
        width, blocks, tokens = SIZES[device]["pipeline"]
        torch.manual_seed(0)
        full = stack(width, blocks)
        half = blocks // 2
        stage = (full[:half] if rank == 0 else full[half:]).to(device)
        optimizer = torch.optim.SGD(stage.parameters(), lr=1e-3)
        inputs, targets = batch(device, width, tokens, seed=0)
        micro_inputs, micro_targets = inputs.chunk(MICROBATCHES), targets.chunk(MICROBATCHES)
        micro_tokens = tokens // MICROBATCHES

        def send(tensor: torch.Tensor, peer: int) -> None:
            if nccl:  # NCCL sends the device tensor itself
                dist.send(tensor.detach().contiguous(), dst=peer)
            else:
                dist.send(tensor.detach().cpu(), dst=peer)  # gloo sends host memory

        def recv(peer: int) -> torch.Tensor:
            if nccl:
                buffer = torch.empty(micro_tokens, width, device=device)
                dist.recv(buffer, src=peer)
                return buffer
            buffer = torch.empty(micro_tokens, width)
            dist.recv(buffer, src=peer)
            return buffer.to(device)

        def step() -> float | None:
            optimizer.zero_grad(set_to_none=True)
            if rank == 0:
                outputs = []
                for mb in range(MICROBATCHES):  # fill: every forward, each activation sent on
                    outputs.append(stage(micro_inputs[mb]))
                    send(outputs[-1], 1)
                for mb in reversed(range(MICROBATCHES)):  # drain: each gradient as it comes back
                    outputs[mb].backward(recv(1))
                optimizer.step()
                return None
            activations, losses = [], []
            for mb in range(MICROBATCHES):
                activation = recv(0).requires_grad_()
                activations.append(activation)
                losses.append(nn.functional.cross_entropy(stage(activation), micro_targets[mb]) / MICROBATCHES)
            for mb in reversed(range(MICROBATCHES)):
                losses[mb].backward()
                send(activations[mb].grad, 0)
            optimizer.step()
            return sum(loss.item() for loss in losses)

        with profiler(device, Path(out) / f"rank-{rank}.json.gz", record_shapes=True) as prof:
            for index in range(STEPS):
                loss = step()
                if loss is not None:
                    print(f"pipeline{'_nccl' if nccl else ''} step {index} loss {loss:.4f}")
                prof.step()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def record_pipeline(out: Path, device: str, nccl: bool = False) -> None:
    folder = out / ("pipeline_nccl" if nccl else "pipeline")
    folder.mkdir(parents=True, exist_ok=True)
    spawn(pipeline_rank, (free_port(), device, str(folder), nccl), world=2, limit_s=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", choices=RUNS, action="append", help="record only this run (repeatable)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: a dry run of the same code on CPU with gloo (tiny sizes)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: use --device cpu for a dry run")
    args.out.mkdir(parents=True, exist_ok=True)
    recorders = {"fsdp": record_fsdp, "pipeline": record_pipeline,
                 "pipeline_nccl": lambda out, device: record_pipeline(out, device, nccl=True),
                 "bf16_compile": lambda out, device: record_bf16(out, device, compiled=True),
                 "bf16_eager": lambda out, device: record_bf16(out, device, compiled=False)}
    failed = []
    for run in args.only or RUNS:
        started = time.monotonic()
        try:
            recorders[run](args.out, args.device)
        except Exception:  # noqa: BLE001  record the other runs; fail at the end
            traceback.print_exc()
            failed.append(run)
            continue
        if args.device == "cuda":
            torch.cuda.synchronize()
        print(f"recorded {run} in {time.monotonic() - started:.1f} s")
    for path in sorted(args.out.rglob("*.json.gz")):
        print(f"{path.relative_to(args.out)}: {path.stat().st_size / 1024:.0f} KiB")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
