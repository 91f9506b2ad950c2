"""Record before/after pairs of small real CPU PyTorch training traces for the rules of
`ctda-sql advise` that a CPU run can show (issue 41): the "before" variant shows the pattern the
rule finds, the "after" variant has the rule's fix applied for real.

Run with a Python that has torch (never a project dependency), pinned to one core:
    taskset -c 1 /work/torchenv/bin/python scripts/record_cpu_advice_pairs.py [--out tests/data/advice]

The committed traces were recorded on an idle 16-core machine (torch 2.11.0+cu130 with
CUDA_VISIBLE_DEVICES= so the run is a CPU run: its trace carries Kineto's one "ERROR" line that no
GPU was found) as `taskset -c 2 python3 scripts/record_cpu_advice_pairs.py`; the 2-core shared
development machine, at a load of 5 to 15, gave median steps of 26 to 164 ms for what took 17 ms
there, a run-to-run spread past the effect being measured.

Each variant is recorded 3 times, interleaved (run-to-run noise), 5 profiled ProfilerSteps, CPU
activities only, one intra-op thread; each file's median step is printed after it is written.

  optsgd_loop / optsgd_foreach   60 blocks of Linear(32, 32) -> LayerNorm(32) -> Tanh (240 small
                                 parameter tensors) on a batch of 16; each step zeroes the grads,
                                 runs forward and backward, then Adam steps. optsgd_loop:
                                 `foreach=False`, a loop of aten ops per tensor inside
                                 `Optimizer.step#Adam.step`, over half the step. optsgd_foreach:
                                 the fix, `fused=True` (one aten::_fused_adam_ over all tensors).
                                 Unprofiled, on that machine, Adam's step took 10.2 ms with
                                 foreach=False, 4.8 ms with foreach=True and 1.5 ms with
                                 fused=True (the fastest of 80 steps each; torch 2.13 CPU on the
                                 busy machine: 5.9, 4.1 and 1.5 ms): the fused optimizer is the one
                                 recorded, and the variant keeps the name the pair was asked for.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, str(Path(__file__).parent))
from record_whatif_pairs import record_interleaved  # noqa: E402  (3 repetitions, interleaved)
from trace_files import gzip_trace  # noqa: E402  (scripts/trace_files.py)

ACTIVE_STEPS = 5
OPTIMIZER_ANNOTATION = "Optimizer.step#Adam.step"  # the name PyTorch gives Adam's step


def many_small_layers(layers: int = 60, width: int = 32) -> torch.nn.Module:
    """Linear -> LayerNorm -> Tanh blocks: 4 small parameter tensors a block (240 in all; more
    would put the foreach=False trace, ~35 events per tensor per step, over 1 MB)."""
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.Tanh()]
    return torch.nn.Sequential(*blocks)


def optimizer_step(fused: bool):
    """A training step whose Adam runs a per-tensor loop (fused=False) or one fused kernel."""
    model = many_small_layers()
    options = {"fused": True} if fused else {"foreach": False}
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, **options)
    batch = torch.randn(16, 32)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(batch).pow(2).mean().backward()
        optimizer.step()
    return step


VARIANTS = {
    "optsgd_loop": lambda: optimizer_step(False), "optsgd_foreach": lambda: optimizer_step(True),
}


def record(variant: str, out: Path) -> None:
    step = VARIANTS[variant]()
    for _ in range(3):  # warm up outside the profiler (Adam's state is made on the first step)
        step()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=ACTIVE_STEPS),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
            for _ in range(2 + ACTIVE_STEPS):
                step()
                prof.step()
        gzip_trace(raw, out)
    print(summary(out))


def summary(path: Path) -> str:
    """The trace's median ProfilerStep and median optimizer step, in ms: what the pair changes."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]

    def median_ms(prefix: str) -> float:
        durations = [e["dur"] for e in events if e.get("ph") == "X" and e.get("name", "").startswith(prefix)]
        if not durations:
            raise SystemExit(f"error: {path} has no event named {prefix}*")
        return statistics.median(durations) / 1000
    return (f"{path.name}: median step {median_ms('ProfilerStep#'):.2f} ms, "
            f"median {OPTIMIZER_ANNOTATION} {median_ms(OPTIMIZER_ANNOTATION):.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="tests/data/advice", help="folder for the .json.gz traces")
    parser.add_argument("--only", nargs="*", choices=sorted(VARIANTS), help="record only these variants")
    args = parser.parse_args()
    torch.set_num_threads(1)
    record_interleaved(Path(args.out), args.only or list(VARIANTS), record)


if __name__ == "__main__":
    main()
