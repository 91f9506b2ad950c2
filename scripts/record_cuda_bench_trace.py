"""Record one large real CUDA training trace (tests/data/cuda/ddp_transformer.json.gz, the
`cuda_ddp` target of bench/bench_job.py): a small Transformer trained with
DistributedDataParallel over NCCL (world size 1 on one GPU), AdamW, `loss.item()` every step;
~13.5k events per step, two CPU threads (the main thread's forward, the autograd thread's
backward) and the compute and NCCL streams. The defaults record the committed trace (243,979
events, 18 profiled steps, on an H100 with torch 2.11).

Run on a machine with a GPU (torch is never a project dependency):
    python3 scripts/record_cuda_bench_trace.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
from trace_files import gzip_trace  # scripts/trace_files.py: the trace says its own name

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def make_model(layers: int) -> nn.Module:
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True),
        num_layers=layers, enable_nested_tensor=False)
    return nn.Sequential(encoder, nn.Linear(256, 16)).to(DEVICE)


def record(out: Path, layers: int, active: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo", rank=0, world_size=1)
    try:
        model = nn.parallel.DistributedDataParallel(make_model(layers), bucket_cap_mb=4)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
        inputs = torch.randn(32, 128, 256, device=DEVICE)
        targets = torch.randint(0, 16, (32,), device=DEVICE)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
        folder = Path(tempfile.mkdtemp())
        raw = folder / "trace.json"
        with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=active),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(raw)), record_shapes=True) as prof:
            for _ in range(active + 2):
                loss = nn.functional.cross_entropy(model(inputs).mean(dim=1), targets)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                loss.item()
                prof.step()
        events = len(json.loads(raw.read_bytes())["traceEvents"])
        gzip_trace(raw, out)
        shutil.rmtree(folder)
        print(f"{out}: {events:,} events, {out.stat().st_size:,} bytes gzipped")
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("tests/data/cuda/ddp_transformer.json.gz"))
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--active", type=int, default=18, help="profiled steps")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record(args.out, args.layers, args.active)


if __name__ == "__main__":
    main()
