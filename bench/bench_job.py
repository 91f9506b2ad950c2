"""The whole job, side by side with HTA (issue 16): `ctda-sql ingest` and `ctda-sql analyze`
of every step (CLI processes, interpreter start included) against HTA 0.5.0's load and
critical_path_analysis of every step (in process, imports not counted), median of --runs;
beside them the same job as one command, `ctda-sql ingest --analyze --method ctda` (one process).

Targets: nccl, ns_resolution (shared traces), a synthesized 202,713-event GPU trace (nccl
tiled by bench/synth.py: CPU threads, kernels, NCCL, flows) and `cuda_ddp`, a real 243,979-event
CUDA trace (tests/data/cuda/ddp_transformer.json.gz, recorded on an H100 by
scripts/record_cuda_bench_trace.py: a Transformer under DDP over NCCL, forward on the main
thread, backward on the autograd thread, 18 steps). Beside each figure, the floors:
  process floor   `python -c "import duckdb; duckdb.connect()"`: what any CLI command pays
  parse floor     gunzip (isal) + a typed msgspec decode of the same bytes, in process

Usage: python bench/bench_job.py [--runs 3] [--targets nccl ns_resolution nccl200k cuda_ddp] [--no-peers]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
from isal import igzip
from synth import write_job

from common import fmt_s, hta_folder, median, peer_python, print_table, ratio, run_peer, traces_dir

BIN = Path(sys.executable).parent
SYNTH_EVENTS = 216_000  # synth tiles whole copies of nccl: this asks for 202,713 events
HTA = "HTA 0.5.0"


def target_file(name: str, work: Path) -> Path:
    """A shared trace by name, `cuda_ddp` (tests/data/cuda), or `nccl200k`: nccl tiled to
    202,713 events (made once in work)."""
    if name == "cuda_ddp":
        return Path(__file__).parents[1] / "tests" / "data" / "cuda" / "ddp_transformer.json.gz"
    if name == "nccl200k":
        made = work / "nccl200k" / "rank-0.json.gz"
        if not made.exists():
            write_job(traces_dir() / "nccl.json.gz", made.parent, ranks=1, events_per_rank=SYNTH_EVENTS)
        return made
    return traces_dir() / f"{name}.json.gz"


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {proc.stderr.strip()[-300:]}")
    return elapsed


def time_ours(trace: Path, work: Path) -> tuple[float, float, float]:
    """(ingest s, analyze s) of a fresh database, each a whole CLI process, and the whole job
    as one command (`ingest --analyze`), all with --method ctda."""
    db, together = work / "job.duckdb", work / "together.duckdb"
    for leftover in (db, Path(f"{db}.wal"), together, Path(f"{together}.wal")):
        leftover.unlink(missing_ok=True)
    ingest_s = wall([str(BIN / "ctda-sql"), "--db", str(db), "ingest", "-q", str(trace)])
    analyze_s = wall([str(BIN / "ctda-sql"), "--db", str(db), "analyze", "-q", "--method", "ctda"])
    one_command_s = wall([str(BIN / "ctda-sql"), "--db", str(together), "ingest", "-q", "--analyze",
                          "--method", "ctda", str(trace)])
    return ingest_s, analyze_s, one_command_s


def our_steps(work: Path) -> int:
    """The windows `analyze` found in the last database time_ours made."""
    import duckdb

    with duckdb.connect(str(work / "job.duckdb"), read_only=True) as con:
        return con.execute("SELECT count(*) FROM analysis_windows").fetchone()[0]


def process_floor() -> float:
    return wall([sys.executable, "-c", "import duckdb; duckdb.connect().execute('SELECT 1').fetchall()"])


class _Event(msgspec.Struct):
    """The fields a typed decode reads; args stays raw bytes."""

    name: str = ""
    ph: str = ""
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    pid: msgspec.Raw = msgspec.Raw(b"")
    tid: msgspec.Raw = msgspec.Raw(b"")
    cat: str = ""
    args: msgspec.Raw = msgspec.Raw(b"")


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]


def parse_floor(trace: Path) -> float:
    """gunzip + a typed msgspec decode (a Struct per event, args left as raw bytes)."""
    start = time.perf_counter()
    msgspec.json.decode(igzip.decompress(trace.read_bytes()), type=_Trace)
    return time.perf_counter() - start


def time_hta(trace: Path) -> dict:
    python = peer_python(HTA)
    if python is None:
        return {}
    with hta_folder([trace]) as folder:
        return run_peer(python, folder, ["--every-step", "0", "ProfilerStep"])


def measure(name: str, work: Path, runs: int, peers: bool) -> list:
    trace = target_file(name, work)
    time_ours(trace, work)  # warm-up: page cache, .pyc
    ours = [time_ours(trace, work) for _ in range(runs)]
    ingest_s, analyze_s, one_s = (median([sample[k] for sample in ours]) for k in range(3))
    hta = [time_hta(trace) for _ in range(runs)] if peers else []
    load_s = median([h.get("load_s") for h in hta])
    every_s = median([h.get("every_step_s") for h in hta])
    steps, ours_steps = (hta[0].get("steps") if hta else None), our_steps(work)
    hta_job = None
    if load_s is not None and every_s is not None and steps:
        # HTA's instances of "ProfilerStep" include the GPU-side annotations of a CUDA trace
        # (twice our windows): then its path time counts for as many steps as ours, never more
        hta_job = load_s + every_s * min(1.0, ours_steps / steps)
    floor_p = median([process_floor() for _ in range(runs)])
    floor_parse = median([parse_floor(trace) for _ in range(runs)])
    return [name, fmt_s(ingest_s), fmt_s(load_s), ratio(load_s, ingest_s),
            fmt_s(ingest_s + analyze_s), fmt_s(hta_job), "-" if steps is None else f"{steps} ({ours_steps})",
            ratio(hta_job, ingest_s + analyze_s), fmt_s(one_s), ratio(hta_job, one_s),
            fmt_s(floor_p), fmt_s(floor_parse)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--targets", nargs="+", default=["nccl", "ns_resolution", "nccl200k", "cuda_ddp"])
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--work-dir", type=Path, help="keep the synthesized trace here between runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctda-bench-job-") as temp:
        work = args.work_dir or Path(temp)
        work.mkdir(parents=True, exist_ok=True)
        rows = [measure(name, work, args.runs, not args.no_peers) for name in args.targets]
    print(f"whole job, median of {args.runs} (ours: CLI processes; HTA: in process, imports not counted)")
    print("HTA load+every step: its load plus its path time per step times our step count, where")
    print("HTA built more paths than we have windows (a CUDA trace's GPU-side ProfilerStep annotations);")
    print("HTA steps: the annotation instances HTA built a path for (our windows)")
    print("ingest --analyze: the same job as one command (one process)")
    print_table(["trace", "ingest s", "HTA load s", "ratio", "ingest+analyze s", "HTA load+every step s",
                 "HTA steps (ours)", "ratio", "ingest --analyze s", "ratio", "process floor s", "parse floor s"],
                rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
