"""Record 2- and 4-rank gloo DDP runs over a shaped loopback (tests/data/shaped/), the measured
truth for `ctda-sql whatif --cluster` on the `shared-link` topology.

    sudo /work/torchenv/bin/python scripts/record_shaped_runs.py [--rates 200,400,800] [--ranks 2,4]

For each rate R (Mbit/s) a network namespace of its own is created, its `lo` brought up with
MTU 9000 (with the default 65536 tbf drops every full packet, its burst being smaller) and
shaped by `tc qdisc add dev lo root tbf rate Rmbit burst 256kbit latency 50ms`. Every rank
runs inside it over 127.0.0.1, so all ranks share one link of rate R. A throughput test
checks the shaping first; the namespace is deleted afterwards. The host's own interfaces
are never touched.

Each run folder (`r{ranks}-{rate}m-{repeat}/`) gets `rank-K.json.gz`; `summary.json` lists
every run's measured throughput and median step.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trace_files import gzip_trace  # scripts/trace_files.py: the trace says its own name

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "shaped"
FEATURES, HIDDEN, CLASSES = 512, 1024, 10     # ~1.6 M parameters: 6.3 MB of gradients a step
BATCH = 128
BUCKET_MB = 2.0                                 # a few all-reduces a step, overlapping backward
WAIT, WARMUP, ACTIVE = 1, 1, 5
STEPS = WAIT + WARMUP + ACTIVE + 1
THROUGHPUT_BYTES = 32 << 20


# ---- inside the namespace ----------------------------------------------------------------

def train(rank: int, world: int, port: int, folder: str) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile, schedule

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES)), bucket_cap_mb=BUCKET_MB)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(rank)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
                 record_shapes=True,
                 on_trace_ready=lambda prof: prof.export_chrome_trace(f"{folder}/rank-{rank}.json")) as prof:
        for _ in range(STEPS):
            inputs = torch.randn(BATCH, FEATURES, generator=generator)
            labels = torch.randint(0, CLASSES, (BATCH,), generator=generator)
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


def worker(world: int, out: Path) -> None:
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(train, args=(world, free_port(), folder), nprocs=world, join=True)
        for rank in range(world):
            gzip_trace(Path(folder) / f"rank-{rank}.json", out / f"rank-{rank}.json.gz")


def throughput() -> None:
    """Send THROUGHPUT_BYTES over 127.0.0.1 and print the rate in Mbit/s."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    if os.fork() == 0:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"\0" * THROUGHPUT_BYTES)
        os._exit(0)
    conn, _ = server.accept()
    received, began = 0, time.perf_counter()
    while chunk := conn.recv(1 << 20):
        received += len(chunk)
    print(json.dumps({"mbit_per_s": received * 8 / (time.perf_counter() - began) / 1e6}))
    os.wait()


# ---- on the host -------------------------------------------------------------------------

def sh(*args: str) -> None:
    subprocess.run(args, check=True)


def shaped(namespace: str, rate_mbit: int) -> None:
    sh("ip", "netns", "add", namespace)
    sh("ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up")
    sh("ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "mtu", "9000")
    sh("ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", "lo", "root", "tbf",
       "rate", f"{rate_mbit}mbit", "burst", "256kbit", "latency", "50ms")


def in_namespace(namespace: str, *args: str) -> str:
    return subprocess.run(["ip", "netns", "exec", namespace, sys.executable, __file__, *args],
                          check=True, capture_output=True, text=True).stdout


def median_step_ms(folder: Path) -> float:
    """Median ProfilerStep length over the ranks' steps (a quick look; the tests use the warehouse)."""
    steps = []
    for trace in folder.glob("rank-*.json.gz"):
        with gzip.open(trace) as f:
            events = json.load(f)["traceEvents"]
        steps += [e["dur"] / 1000 for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    return statistics.median(steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rates", default="200,400,800", help="Mbit/s, comma-separated")
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--throughput", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.throughput:
        return throughput()
    if args.worker:
        return worker(args.worker, args.out)
    summary_path = args.out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    for rate in (int(r) for r in args.rates.split(",")):
        namespace = f"ctda{rate}"
        shaped(namespace, rate)
        try:
            measured = json.loads(in_namespace(namespace, "--throughput"))["mbit_per_s"]
            print(f"{rate} Mbit/s: throughput test {measured:.1f} Mbit/s", flush=True)
            for world in (int(n) for n in args.ranks.split(",")):
                for repeat in range(1, args.repeats + 1):
                    name = f"r{world}-{rate}m-{repeat}"
                    in_namespace(namespace, "--worker", str(world), "--out", str(args.out / name))
                    step = median_step_ms(args.out / name)
                    summary[name] = {"ranks": world, "rate_mbit": rate, "throughput_mbit": round(measured, 1),
                                     "median_step_ms": round(step, 2), "load_1min": os.getloadavg()[0]}
                    print(f"  {name}: median step {step:.1f} ms (load {os.getloadavg()[0]:.1f})", flush=True)
        finally:
            sh("ip", "netns", "del", namespace)
    summary_path.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
