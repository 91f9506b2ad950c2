"""Scale: a synthesized multi-rank job (bench/synth.py; default 16 ranks x ~500k events tiled
from ns_resolution) through `ctda-sql ingest` and `ctda-sql analyze`.

Reports: wall time of each command, its peak RSS (the whole process tree, sampled from
/proc, and the largest single process from getrusage), database size vs raw JSON size, and
the time of every saved report (`ctda-sql report --list`) on the result, in process (query
only) and through the CLI (interpreter start included).
Targets (issue 6): ingest + analyze <= 60 s, peak RSS <= 4 GB, database <= 10% of raw
JSON, every saved report < 1 s.

Usage: python bench/bench_scale.py [--ranks 16] [--events 500000] [--job-dir DIR] [--keep]
                                   [--code-dir DIR] [--no-reports] [--python-frames DEPTH]
  --job-dir DIR   reuse (or create) the synthesized job there instead of a temp folder
  --ranks 2 --events 100000   a quick, small version
  --python-frames DEPTH       frames around each top-level op, as a with_stack=True trace has
  --code-dir DIR  ingest and analyze with another checkout's code (a before/after pair:
                  `git worktree add /tmp/before HEAD~1`, then one run with each)
  --no-reports    only ingest and analyze (the quick before/after measurement)
$CTDA_MEMORY_LIMIT is passed on to the commands (the default is the checkout's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from synth import write_job

from common import checkout_cli, fmt_s, print_table, traces_dir

SCALE_RUN = "scale"
TARGETS = {"wall_s": 60.0, "rss_gb": 4.0, "db_share": 0.10, "report_s": 1.0}


class TreeRssSampler:
    """Peak summed RSS of a process and all its descendants, sampled from /proc."""

    def __init__(self, pid: int, interval: float = 0.05):
        self.pid, self.interval, self.peak_bytes = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, sum(_rss_bytes(p) for p in _tree(self.pid)))
            self._stop.wait(self.interval)


def _tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo.extend(int(child) for child in task.read_text().split())
            except OSError:
                pass
    return found


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# Runs the command as its child and reports getrusage(RUSAGE_CHILDREN).ru_maxrss: the
# largest single process of the command's tree (pool workers included), per command.
_MAXRSS_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print('maxrss_kb', usage.ru_maxrss, usage.ru_utime + usage.ru_stime, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def run_measured(command: list[str]) -> dict:
    """Wall time, peak tree RSS (sampled) and the largest single process's max RSS."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _MAXRSS_WRAPPER, *command],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with TreeRssSampler(proc.pid) as sampler:
        out, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{err.strip()[-2000:]}")
    usage = next(line.split() for line in err.splitlines() if line.startswith("maxrss_kb"))
    return {"wall_s": wall, "cpu_s": float(usage[2]), "tree_rss_gb": sampler.peak_bytes / 1e9,
            "max_process_rss_gb": int(usage[1]) * 1024 / 1e9, "stdout": out.strip()}


def prepare_job(args) -> tuple[Path, int, int]:
    """The job folder, its raw JSON bytes and event count (synthesized when not there yet)."""
    folder = Path(args.job_dir) if args.job_dir else Path(tempfile.mkdtemp(prefix="ctda-scale-"))
    # not *.json: bench_lake.py ingests a --job-dir folder itself, and would take it for a trace
    manifest = folder / "job.manifest"
    if manifest.exists():
        job = json.loads(manifest.read_text())
        if (job.get("ranks"), job.get("events_per_rank"), job.get("python_frames", 0)) == (
                args.ranks, args.events, args.python_frames):
            print(f"reusing the job in {folder}")
            return folder / "ranks", job["raw_json_bytes"], job["events"]
    start = time.perf_counter()
    job = write_job(traces_dir() / f"{args.base}.json.gz", folder / "ranks", args.ranks, args.events,
                    python_frames=args.python_frames)
    print(f"synthesized {args.ranks} ranks x {job['tiles']} tiles of {args.base}: {job['events']:,} events, "
          f"{job['raw_json_bytes'] / 1e9:.2f} GB JSON in {time.perf_counter() - start:.1f} s ({folder})")
    job.update(ranks=args.ranks, events_per_rank=args.events, python_frames=args.python_frames)
    manifest.write_text(json.dumps({k: v for k, v in job.items() if k != "files"}))
    return folder / "ranks", job["raw_json_bytes"], job["events"]


def database_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, db.with_name(db.name + ".wal")) if p.exists())


def storage_breakdown(db: Path) -> list[tuple[str, float]]:
    """Approximate MB per table and per events column (blocks they touch; small columns share)."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    block = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()[0]
    tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
    sizes = [(t, _blocks(con, t) * block / 1e6) for t in tables]
    columns = con.execute(
        f"SELECT 'events.' || column_name, count(DISTINCT block) FROM ({_BLOCKS_OF.format(table='events')}) "
        "GROUP BY ALL ORDER BY 2 DESC LIMIT 6").fetchall()
    con.close()
    top_tables = sorted(sizes, key=lambda s: -s[1])[:4]
    return top_tables + [(name, blocks * block / 1e6) for name, blocks in columns]


# every block a segment uses: zstd segments spill into additional blocks
_BLOCKS_OF = ("SELECT column_name, unnest(list_prepend(block_id, coalesce(additional_block_ids, []))) AS block "
              "FROM pragma_storage_info('{table}') WHERE block_id >= 0")


def _blocks(con, table: str) -> int:
    return con.execute(f"SELECT count(DISTINCT block) FROM ({_BLOCKS_OF.format(table=table)})").fetchone()[0]


def gz_bytes(job_dir: Path) -> int:
    return sum(p.stat().st_size for p in job_dir.glob("*.json.gz"))


# Reports that compare two runs get the one run on both sides (a self-diff still runs it all).
_TWO_RUN_PARAMS = ("run_a", "run_b")


def required_params(report) -> dict[str, str]:
    return {p.name: SCALE_RUN for p in report.params if p.name in _TWO_RUN_PARAMS}


def time_reports(db: Path, cli: bool) -> list[dict]:
    """Every saved report on the database: in-process query time, and CLI wall time."""
    from ctda_sql.core.connection import connect
    from ctda_sql.engine.reports import all_reports, run_report

    listed = json.loads(subprocess.run(["ctda-sql", "report", "--list", "--format", "json"],
                                       check=True, capture_output=True, text=True).stdout)
    reports = all_reports()
    con = connect(db, read_only=True)
    results = []
    for entry in listed:
        report = reports[entry["name"]]
        row = {"name": report.name, "rows": None, "error": None}
        given = required_params(report)
        start = time.perf_counter()
        try:
            row["rows"] = len(run_report(con, report, given).fetchall())
        except Exception as exc:  # a report that needs parameters, or a broken one
            row["error"] = str(exc).splitlines()[0][:120]
        row["query_s"] = time.perf_counter() - start
        if cli:
            start = time.perf_counter()
            params = [arg for key, value in given.items() for arg in ("--param", f"{key}={value}")]
            subprocess.run(["ctda-sql", "report", report.name, "--db", str(db), "--format", "json", *params],
                           capture_output=True)
            row["cli_s"] = time.perf_counter() - start
        results.append(row)
    con.close()
    return results


def add_job_arguments(parser) -> None:
    """The options that say which synthesized job to use (prepare_job reads them)."""
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--events", type=int, default=500_000, help="events per rank (approximate)")
    parser.add_argument("--base", default="ns_resolution")
    parser.add_argument("--python-frames", type=int, default=0, metavar="DEPTH",
                        help="synthesize DEPTH python_function frames around each top-level cpu_op (with_stack)")
    parser.add_argument("--job-dir", help="keep the synthesized job here and reuse it next time")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(parser)
    parser.add_argument("--keep", action="store_true", help="keep the database (printed path)")
    parser.add_argument("--no-cli-reports", action="store_true", help="skip the CLI wall time per report")
    parser.add_argument("--no-reports", action="store_true", help="skip the saved reports altogether")
    parser.add_argument("--code-dir", type=Path, help="run ingest and analyze with this checkout's code")
    args = parser.parse_args()
    job_dir, raw_bytes, events = prepare_job(args)
    work = Path(tempfile.mkdtemp(prefix="ctda-scale-db-"))
    db = work / "scale.duckdb"
    cli = cli_command(args.code_dir)
    ingest = run_measured([*cli, "ingest", "--db", str(db), "--quiet", "--run", SCALE_RUN, str(job_dir)])
    analyze = run_measured([*cli, "analyze", "--db", str(db), "--quiet"])
    size = database_bytes(db)
    reports = [] if args.no_reports else time_reports(db, cli=not args.no_cli_reports)
    print_summary(args, events, raw_bytes, size, ingest, analyze, reports)
    print_storage(db, raw_bytes, gz_bytes(job_dir), events)
    if args.keep:
        print(f"database kept at {db}")
    else:
        db.unlink()
    return 0


def cli_command(code_dir: Path | None) -> list[str]:
    """`ctda-sql`, or the CLI of the checkout in code_dir."""
    return ["ctda-sql"] if code_dir is None else checkout_cli(code_dir)


def print_summary(args, events, raw_bytes, size, ingest, analyze, reports) -> None:
    total = ingest["wall_s"] + analyze["wall_s"]
    peak = max(ingest["tree_rss_gb"], analyze["tree_rss_gb"])
    print(f"\nscale: {args.ranks} ranks, {events:,} events, {raw_bytes / 1e9:.2f} GB raw JSON")
    rows = [[name, fmt_s(m["wall_s"]), f"{m['cpu_s']:.1f}", f"{events / m['wall_s']:,.0f}",
             f"{m['tree_rss_gb']:.2f}", f"{m['max_process_rss_gb']:.2f}"]
            for name, m in (("ingest", ingest), ("analyze", analyze))]
    # CPU seconds (user + sys, all processes) hardly move with the load beside us; wall does
    print_table(["step", "wall s", "CPU s", "events/s", "peak RSS GB (tree)", "max process RSS GB"], rows)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"ingest + analyze: {total:.1f} s (target <= {TARGETS['wall_s']:.0f} s: {_verdict(total <= TARGETS['wall_s'])})")
    print(f"peak RSS: {peak:.2f} GB (target <= {TARGETS['rss_gb']:.0f} GB: {_verdict(peak <= TARGETS['rss_gb'])})")
    share = size / raw_bytes
    print(f"database: {size / 1e6:,.1f} MB = {share:.1%} of raw JSON "
          f"(target <= {TARGETS['db_share']:.0%}: {_verdict(share <= TARGETS['db_share'])})")
    print(f"analyze said: {analyze['stdout'][:300]}")
    if not reports:
        return
    print("\nsaved reports (query = in process, CLI = `ctda-sql report NAME` wall, interpreter start included)")
    report_rows = [[r["name"], fmt_s(r["query_s"]), fmt_s(r.get("cli_s")),
                    "-" if r["rows"] is None else r["rows"], r["error"] or ""] for r in reports]
    print_table(["report", "query s", "CLI s", "rows", "error"], report_rows)
    slowest = max(reports, key=lambda r: r["query_s"])
    print(f"slowest report: {slowest['name']} {slowest['query_s']:.3f} s "
          f"(target < {TARGETS['report_s']:.0f} s: {_verdict(slowest['query_s'] < TARGETS['report_s'])})")


def print_storage(db: Path, raw_bytes: int, gz: int, events: int) -> None:
    print(f"\nfor comparison: the input .json.gz files (isal level 1) are {gz / 1e6:,.1f} MB = {gz / raw_bytes:.1%} "
          f"of the raw JSON; raw JSON is {raw_bytes / events:.0f} B/event")
    print("approximate storage (blocks touched; small columns share blocks):")
    print_table(["table / column", "MB", "B/event"],
                [[name, f"{mb:,.1f}", f"{mb * 1e6 / events:.1f}"] for name, mb in storage_breakdown(db)])


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


if __name__ == "__main__":
    sys.exit(main())
