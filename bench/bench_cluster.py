"""`whatif --cluster`: the 4,096-device projection (speed) and the shaped-network validation.

    python bench/bench_cluster.py projection [--trace-dir tests/data/shaped/r2-400m-1]
    python bench/bench_cluster.py trends     [--trace-dir ...]
    python bench/bench_cluster.py shaped     [--data tests/data/shaped]

projection: a measured 2-rank gloo DDP job projected onto HCSim's leaf-spine (32 leaves x 16
hosts x 8 devices = 4,096 devices), ring all-reduce over all 4,096 ranks; the target is a
step in <= 60 s (issue 34). Prints the wall time of the simulation and of the whole what-if.

trends: HCSim's sweeps on that leaf-spine (scale, bandwidth, latency, ring vs coherent,
heterogeneous devices), as the communication share of the step.

shaped: the validation on the runs of scripts/record_shaped_runs.py (every rank on one
loopback shaped to R Mbit/s: the shared-link topology). Truth is a run's median step (the
mean over its ranks of each rank's median); the noise is the spread of that truth over the
repetitions. Predicts each rate from each other, and 4 ranks from 2.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ctda_sql.core.connection import connect  # noqa: E402
from ctda_sql.engine.analyze import analyze  # noqa: E402
from ctda_sql.ingest.load import ingest  # noqa: E402
from ctda_sql.whatif.cluster import check_cluster, whatif_cluster  # noqa: E402

LEAF_SPINE = {"cluster": {"hosts": 512, "devices_per_host": 8, "device_speed": 1.0},
              "intra_host": {"bandwidth_gbps": 3600.0, "latency_us": 1.0},
              "inter_host": {"topology": "leaf-spine", "bandwidth_gbps": 400.0, "latency_us": 5.0,
                             "hosts_per_leaf": 16, "uplink_gbps": 6400.0}}
TARGET_S = 60.0


def shared_link(ranks: int, rate_mbit: float, device_speed: float = 1.0) -> dict:
    return {"cluster": {"hosts": ranks, "devices_per_host": 1, "device_speed": device_speed},
            "inter_host": {"topology": "shared-link", "bandwidth_gbps": rate_mbit / 1000.0}}


def open_runs(folders: list[Path]):
    con = connect(Path(tempfile.mkdtemp(prefix="ctda-cluster-")) / "w.duckdb")
    for folder in folders:
        ingest(con, [folder], run_name=folder.name, show_progress=False)
    analyze(con, show_progress=False)
    return con


def median_step_ms(rows: list[tuple], column: int) -> float:
    """Mean over ranks of each rank's median step (ms) of whatif rows."""
    by_rank: dict[int, list[float]] = {}
    for row in rows:
        by_rank.setdefault(row[1], []).append(row[column])
    return statistics.mean(statistics.median(v) for v in by_rank.values()) / 1000.0


def predict(con, run: str, cluster: dict, world: int | None = None, name: str | None = None) -> tuple[float, float]:
    """(measured, predicted) median step of `run` on `cluster`, ms."""
    result, _ = whatif_cluster(con, check_cluster(cluster), run=run, world_size=world, name=name or run, top=0)
    return median_step_ms(result.steps, 3), median_step_ms(result.steps, 5)


def projection(args) -> None:
    con = open_runs([args.trace_dir])
    began = time.perf_counter()
    from ctda_sql.whatif import cluster as module
    simulate = module.simulate_rounds
    spent = []

    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return simulate(*a, **k)
        finally:
            spent.append(time.perf_counter() - t)

    module.simulate_rounds = timed
    measured, predicted = predict(con, args.trace_dir.name, LEAF_SPINE, world=4096, name="leaf-spine 4096")
    total = time.perf_counter() - began
    print(f"4,096 devices, leaf-spine, ring: measured step {measured:.1f} ms, projected {predicted:.1f} ms; "
          f"simulation {sum(spent):.1f} s, whole what-if {total:.1f} s (target <= {TARGET_S:.0f} s)")


def trends(args) -> None:
    con = open_runs([args.trace_dir])
    run = args.trace_dir.name
    compute = predict(con, run, {**LEAF_SPINE, "inter_host": {**LEAF_SPINE["inter_host"], "bandwidth_gbps": 1e6,
                                                              "uplink_gbps": 1e7}}, world=8)[1]
    print(f"step without communication (8 ranks, unlimited network): {compute:.1f} ms")
    print("| sweep | value | projected step (ms) | communication share |")
    print("| --- | --- | --- | --- |")

    def row(label, value, cluster, world, algorithm=None):
        result, _ = whatif_cluster(con, check_cluster(cluster), run=run, world_size=world, allreduce=algorithm,
                                   name=f"{label}={value}", top=0)
        step = median_step_ms(result.steps, 5)
        print(f"| {label} | {value} | {step:.1f} | {max(0.0, 1 - compute / step):.1%} |", flush=True)

    for world in (8, 64, 512, 4096):
        row("ranks (ring)", world, LEAF_SPINE, world)
    for world in (64, 4096):
        row("ranks (coherent)", world, LEAF_SPINE, world, "coherent")
    for gbps in (100, 200, 400, 800):
        row("inter_host.bandwidth_gbps (512 ranks)", gbps,
            {**LEAF_SPINE, "inter_host": {**LEAF_SPINE["inter_host"], "bandwidth_gbps": float(gbps)}}, 512)
    for latency in (1, 5, 20, 100):
        row("inter_host.latency_us (512 ranks)", latency,
            {**LEAF_SPINE, "inter_host": {**LEAF_SPINE["inter_host"], "latency_us": float(latency)}}, 512)
    slow = {**LEAF_SPINE, "cluster": {**LEAF_SPINE["cluster"],
                                      "groups": [{"first_host": 256, "last_host": 511, "device_speed": 0.5}]}}
    row("half the hosts at device_speed 0.5 (512 ranks)", "0.5", slow, 512)
    row("half the hosts at device_speed 0.5 (4096 ranks)", "0.5", slow, 4096)


def shaped(args) -> None:
    folders = sorted(p for p in args.data.iterdir() if re.fullmatch(r"r\d+-\d+m-\d+", p.name))
    con = open_runs(folders)
    runs = {}
    for folder in folders:
        ranks, rate, repeat = map(int, re.findall(r"\d+", folder.name))
        runs.setdefault((ranks, rate), []).append(folder.name)
    truth, noise = {}, {}
    for key, names in runs.items():
        steps = [predict(con, name, shared_link(key[0], key[1]), name=f"own {name}")[0] for name in names]
        truth[key], noise[key] = statistics.mean(steps), max(steps) - min(steps)
    print("| ranks | recorded at (Mbit/s) | predicted from | truth (ms) | noise (ms) | predicted (ms) | error |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rates = sorted({rate for _, rate in runs})

    def line(ranks, rate, source, predicted):
        error = predicted - truth[(ranks, rate)]
        print(f"| {ranks} | {rate} | {source} | {truth[(ranks, rate)]:.1f} | {noise[(ranks, rate)]:.1f} | "
              f"{predicted:.1f} | {error / truth[(ranks, rate)]:+.1%} |", flush=True)

    for (ranks, rate), names in sorted(runs.items()):
        for source_rate in rates:
            source = (ranks, source_rate)
            if source in runs:
                name = runs[source][0]
                line(ranks, rate, name, predict(con, name, shared_link(ranks, rate), name=f"{name} at {rate}")[1])
    # 4 ranks from 2: the same link; 4 processes on 2 cores also run slower (device_speed)
    speed = None
    if (2, rates[-1]) in runs and (4, rates[-1]) in runs:
        fast = {"cluster": {"hosts": 4, "devices_per_host": 1},
                "inter_host": {"topology": "shared-link", "bandwidth_gbps": 1e6}}
        two = predict(con, runs[(2, rates[-1])][0], {**fast, "cluster": {"hosts": 2, "devices_per_host": 1}})[1]
        four = predict(con, runs[(4, rates[-1])][0], fast)[1]
        speed = two / four
        print(f"\ncompute per step without the network (unlimited link): 2 ranks {two:.1f} ms, 4 ranks {four:.1f} ms "
              f"at {rates[-1]} Mbit/s: device_speed {speed:.3f} for 4 ranks on 2 cores")
    for rate in rates:
        if (2, rate) in runs and (4, rate) in runs:
            name = runs[(2, rate)][0]
            line(4, rate, f"{name}, world 4", predict(con, name, shared_link(4, rate), world=4, name=f"{name} w4")[1])
            if speed:
                line(4, rate, f"{name}, world 4, device_speed {speed:.2f}",
                     predict(con, name, shared_link(4, rate, speed), world=4, name=f"{name} w4s")[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("projection", "trends", "shaped"))
    parser.add_argument("--trace-dir", type=Path, default=REPO / "tests" / "data" / "shaped" / "r2-400m-1")
    parser.add_argument("--data", type=Path, default=REPO / "tests" / "data" / "shaped")
    args = parser.parse_args()
    {"projection": projection, "trends": trends, "shaped": shaped}[args.what](args)


if __name__ == "__main__":
    main()
