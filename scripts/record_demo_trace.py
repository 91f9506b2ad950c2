"""Record the bundled demo trace: a small MLP trained on random data under torch.profiler.

    python scripts/record_demo_trace.py [--out warehouse/data/demo_trace.json.gz]

The loop has every phase the critical-path analysis tells apart: data loading (a Dataset
that does real CPU preprocessing), forward, loss, backward and the optimizer step, inside
`ProfilerStep#N` annotations (schedule wait=1, warmup=1, active=3). `with_stack=True`
adds python_function events, `record_shapes=True` adds input shapes.

Threads: on CUDA the autograd engine runs backward on its own thread (pt_autograd_0),
so the trace shows the main/autograd split. On a CPU-only machine backward runs on the
main thread, so the CPU recording has a single busy thread; that is expected.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset
from trace_files import gzip_trace  # scripts/trace_files.py: the trace says its own name

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "warehouse" / "data" / "demo_trace.json.gz"
FEATURES = 64
CLASSES = 10
BATCH = 32
# wait + warmup + active steps of the profiler schedule, plus one to flush the last step
STEPS = 1 + 1 + 3 + 1


class NoisySignals(Dataset):
    """Random 1-D signals smoothed and normalised per item: CPU work in data loading."""

    def __init__(self, size: int, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.raw = torch.randn(size, FEATURES * 2, generator=generator)
        self.labels = torch.randint(0, CLASSES, (size,), generator=generator)

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, index: int):
        signal = self.raw[index]
        smoothed = torch.nn.functional.avg_pool1d(signal.view(1, 1, -1), 2).flatten()
        normalised = (smoothed - smoothed.mean()) / (smoothed.std() + 1e-6)
        return normalised, self.labels[index]


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, 128), nn.ReLU(),
        nn.Linear(128, 128), nn.ReLU(),
        nn.Linear(128, CLASSES),
    )


def train_step(model, optimizer, loss_fn, batch, device) -> None:
    inputs, labels = (t.to(device, non_blocking=True) for t in batch)
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()


def record(out: Path) -> Path:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(NoisySignals(BATCH * STEPS), batch_size=BATCH, shuffle=True)
    with tempfile.TemporaryDirectory() as folder:
        with profile(activities=_activities(), schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                     record_shapes=True, with_stack=True,
                     on_trace_ready=_save_to(Path(folder))) as prof:
            for batch in loader:
                train_step(model, optimizer, nn.CrossEntropyLoss(), batch, device)
                prof.step()
        _gzip_trace(Path(folder), out)
    return out


def _activities() -> list[ProfilerActivity]:
    if torch.cuda.is_available():
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    return [ProfilerActivity.CPU]


def _save_to(folder: Path):
    def save(prof) -> None:
        prof.export_chrome_trace(str(folder / "trace.json"))

    return save


def _gzip_trace(folder: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    gzip_trace(folder / "trace.json", out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    out = record(parser.parse_args().out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
