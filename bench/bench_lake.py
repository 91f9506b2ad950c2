"""Scale-out: a synthesized job (bench/synth.py) through `ctda-sql ingest --lake` and
`ctda-sql analyze --lake` on Dask, with 1 and 2 local worker processes (the scaling ratio)
and through an existing cluster (`dask scheduler` + `dask worker` started here on
127.0.0.1), beside the single-file DuckDB path.

Reports per configuration: wall time of ingest and of analyze, peak RSS of the largest Dask
worker process and of the client process (sampled from /proc), lake bytes vs raw JSON bytes.

Usage: python bench/bench_lake.py [--ranks 64] [--events 200000] [--job-dir DIR] [--keep]
                                  [--no-single-file] [--workers 1,2] [--method ctda]
                                  [--no-external] [--code-dir CHECKOUT]

--code-dir runs another checkout's CLI (a before/after pair); the LocalCluster's workers
inherit its sys.path, while an external `dask worker` would import the installed package, so
that configuration is skipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from synth import write_job

from common import checkout_cli, print_table, traces_dir

BIN = Path(sys.executable).parent
CLI = [str(BIN / "ctda-sql")]  # or another checkout's (--code-dir)
METHOD = "ctda"


def _memory_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, RssAnon) of a process in kB: RssAnon leaves out file pages mapped from disk
    (the page cache can drop them), so it is what a worker must keep resident."""
    found = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(("VmRSS:", "RssAnon:")):
                    found[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return found.get("VmRSS", 0), found.get("RssAnon", 0)


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(c) for c in handle.read().split()]
    except OSError:
        pass
    return found


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


class PeakRss:
    """Peak RSS (and peak anonymous RSS, in `anon`) per process of the trees under `roots`,
    sampled every 50 ms."""

    def __init__(self, roots: list[int]):
        self.roots, self.peaks, self.anon, self._stop = roots, {}, {}, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            for root in self.roots:
                for pid in _tree(root):
                    rss, anon = _memory_kb(pid)
                    self.peaks[pid] = max(self.peaks.get(pid, 0), rss)
                    self.anon[pid] = max(self.anon.get(pid, 0), anon)
            time.sleep(0.05)

    def stop(self) -> tuple[dict[int, int], dict[int, int]]:
        self._stop.set()
        self._thread.join()
        return self.peaks, self.anon


def timed_cli(args: list[str], watch: list[int] = ()) -> tuple[float, tuple[dict, dict], int]:
    """Wall seconds of `ctda-sql ARGS`, (peak RSS, peak anonymous RSS) in kB per process of it
    and of `watch`."""
    start = time.perf_counter()
    process = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = PeakRss([process.pid, *watch])
    out, err = process.communicate()
    wall = time.perf_counter() - start
    peaks = sampler.stop()
    if process.returncode != 0:
        sys.exit(f"ctda-sql {' '.join(args)} failed:\n{err.decode()[-2000:]}")
    return wall, peaks, process.pid


def raw_json_bytes(files: list[Path]) -> int:
    """Uncompressed sizes from the gzip trailers (each rank file < 4 GiB)."""
    total = 0
    for f in files:
        with open(f, "rb") as handle:
            handle.seek(-4, os.SEEK_END)
            total += struct.unpack("<I", handle.read(4))[0]
    return total


def lake_bytes(lake: Path, tables: tuple[str, ...] | None = None) -> int:
    files = lake.rglob("*.parquet") if tables is None else (p for t in tables for p in (lake / t).rglob("*.parquet"))
    return sum(p.stat().st_size for p in files if "_tmp" not in p.parts)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_peak(peaks: dict[int, int], exclude: set[int]) -> int:
    return max((kb for pid, kb in peaks.items() if pid not in exclude), default=0)


def run_lake(job: Path, lake: Path, extra: list[str], watch: list[int] = (), exclude: set[int] = ()) -> dict:
    shutil.rmtree(lake, ignore_errors=True)
    ingest_s, ingest_peaks, ingest_pid = timed_cli(["ingest", "-q", str(job), "--lake", str(lake), *extra], watch)
    analyze_s, analyze_peaks, analyze_pid = timed_cli(["analyze", "-q", "--lake", str(lake), "--method", METHOD, *extra], watch)
    clients = {ingest_pid, analyze_pid, *exclude}
    (ingest_rss, ingest_anon), (analyze_rss, analyze_anon) = ingest_peaks, analyze_peaks
    return {
        "ingest_s": ingest_s, "analyze_s": analyze_s,
        "worker_rss_mb": max(_worker_peak(ingest_rss, clients), _worker_peak(analyze_rss, clients)) / 1024,
        "worker_anon_mb": max(_worker_peak(ingest_anon, clients), _worker_peak(analyze_anon, clients)) / 1024,
        "client_rss_mb": max(ingest_rss.get(ingest_pid, 0), analyze_rss.get(analyze_pid, 0)) / 1024,
        "lake_bytes": lake_bytes(lake), "ingest_tables_bytes": lake_bytes(lake, ("events", "steps", "threads", "traces")),
    }


def run_external(job: Path, lake: Path, workers: int, log: Path) -> dict:
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    with open(log, "w") as logs:
        scheduler = subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                      "--no-dashboard"], stdout=logs, stderr=logs)
        worker = subprocess.Popen([str(BIN / "dask"), "worker", address, "--nworkers", str(workers),
                                   "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
                                  stdout=logs, stderr=logs)
        try:
            from distributed import Client

            with Client(address, timeout="30s") as client:
                client.wait_for_workers(workers, timeout=60)
            return run_lake(job, lake, ["--scheduler", address], watch=[worker.pid], exclude={worker.pid})
        finally:
            for process in (worker, scheduler):
                process.terminate()
                process.wait(timeout=30)


def run_single_file(job: Path, db: Path) -> dict:
    db.unlink(missing_ok=True)
    ingest_s, ingest_peaks, _ = timed_cli(["--db", str(db), "ingest", "-q", str(job)])
    analyze_s, analyze_peaks, _ = timed_cli(["--db", str(db), "analyze", "-q", "--method", METHOD])
    return {"ingest_s": ingest_s, "analyze_s": analyze_s, "db_bytes": db.stat().st_size,
            "rss_mb": max(sum(ingest_peaks[0].values()), sum(analyze_peaks[0].values())) / 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--job-dir", type=Path)
    parser.add_argument("--workers", default="1,2", help="local worker counts to compare")
    parser.add_argument("--no-single-file", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--method", default="ctda", help="analyze --method (all adds the cross-rank task)")
    parser.add_argument("--no-external", action="store_true", help="skip the external-cluster run")
    parser.add_argument("--code-dir", type=Path, help="run this checkout's CLI instead of the installed one")
    args = parser.parse_args()
    global CLI, METHOD
    METHOD = args.method
    if args.code_dir:
        CLI = checkout_cli(args.code_dir)
    work = Path(tempfile.mkdtemp(prefix="bench-lake-"))
    job = args.job_dir or work / "job"
    if not (job.is_dir() and len(list(job.glob("*.json.gz"))) == args.ranks):
        job.mkdir(parents=True, exist_ok=True)
        write_job(traces_dir() / "ns_resolution.json.gz", job, args.ranks, args.events)
    files = sorted(job.glob("*.json.gz"))
    raw = raw_json_bytes(files)
    print(f"job: {len(files)} ranks, {sum(f.stat().st_size for f in files) / 1e6:.0f} MB gzipped, "
          f"{raw / 1e9:.2f} GB JSON; {os.cpu_count()} cores")
    rows, results = [], {}
    for n in [int(x) for x in args.workers.split(",")]:
        results[n] = r = run_lake(job, work / f"lake{n}", ["--workers", str(n)])
        rows.append([f"lake, LocalCluster {n} worker(s)", f"{r['ingest_s']:.1f}", f"{r['analyze_s']:.1f}",
                     f"{r['ingest_s'] + r['analyze_s']:.1f}", f"{r['worker_rss_mb']:.0f} ({r['worker_anon_mb']:.0f})",
                     f"{r['client_rss_mb']:.0f}",
                     f"{r['lake_bytes'] / raw:.1%} ({r['ingest_tables_bytes'] / raw:.1%} ingested tables)"])
    if not (args.no_external or args.code_dir):
        ext = run_external(job, work / "lake-ext", 2, work / "dask.log")
        rows.append(["lake, external scheduler + 2 workers", f"{ext['ingest_s']:.1f}", f"{ext['analyze_s']:.1f}",
                     f"{ext['ingest_s'] + ext['analyze_s']:.1f}",
                     f"{ext['worker_rss_mb']:.0f} ({ext['worker_anon_mb']:.0f})",
                     f"{ext['client_rss_mb']:.0f}", f"{ext['lake_bytes'] / raw:.1%}"])
    if not args.no_single_file:
        single = run_single_file(job, work / "single.duckdb")
        rows.append(["single DuckDB file", f"{single['ingest_s']:.1f}", f"{single['analyze_s']:.1f}",
                     f"{single['ingest_s'] + single['analyze_s']:.1f}", "-", f"{single['rss_mb']:.0f} (tree)",
                     f"{single['db_bytes'] / raw:.1%}"])
    print_table(["configuration", "ingest s", "analyze s", "total s", "peak RSS (anon)/worker MB", "client MB",
                 "bytes / raw JSON"], rows)
    counts = sorted(results)
    if len(counts) >= 2:
        a, b = results[counts[0]], results[counts[-1]]
        speedup = (a["ingest_s"] + a["analyze_s"]) / (b["ingest_s"] + b["analyze_s"])
        print(f"scaling: {counts[-1]} workers vs {counts[0]}: {speedup:.2f}x (ingest + analyze)")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
