"""Critical-path speed: `ctda-sql analyze` (every step of every rank, both methods) vs HTA's
critical_path_analysis for ONE step of the same trace (HTA 0.5.0 and traceinsight 0.6.1).

  ours        warehouse.analyze.analyze(con, method='all') on a freshly ingested temp
              database (ingest not counted), in this process; re-run --runs times
  ours CLI    `ctda-sql analyze` wall time, interpreter start included
  peers       critical_path_analysis(rank 0, 'ProfilerStep', instance --step) after the load,
              in the peer venv; the load is reported beside it, not counted

Usage: python bench/bench_analyze.py [--trace ns_resolution] [--runs 5] [--step 1] [--no-peers]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PEER_VENVS, fmt_s, hta_folder, median, peer_python, print_table, ratio, run_peer, traces_dir


def require_analyze():
    """The engine's entry point, or exit with a clear message while it does not exist yet."""
    try:
        from ctda_sql.engine.analyze import analyze
    except ImportError as exc:
        sys.exit(f"ctda_sql.engine.analyze.analyze is not available yet ({exc}); "
                 "bench_analyze.py needs the critical-path engine")
    return analyze


def ingested_db(folder: Path, trace: Path) -> Path:
    from ctda_sql.core.connection import connect
    from ctda_sql.ingest.load import ingest

    db = folder / "bench.duckdb"
    con = connect(db)
    ingest(con, [trace], show_progress=False)
    con.close()
    return db


def time_ours(db: Path) -> tuple[float, dict]:
    from ctda_sql.core.connection import connect

    analyze = require_analyze()
    con = connect(db)
    start = time.perf_counter()
    analyze(con, run=None, method="all", window_prefix=None, show_progress=False)
    elapsed = time.perf_counter() - start
    counts = {
        "windows": con.execute("SELECT count(DISTINCT (run_id, rank, step, method)) FROM critical_path").fetchone()[0],
        "nodes": con.execute("SELECT count(*) FROM nodes").fetchone()[0],
    }
    con.close()
    return elapsed, counts


# The least any critical-path method does first: order each CPU thread's events by time and
# find which are nested (a running max of end times), one SQL statement into a temp table.
FLOOR_SQL = """
CREATE OR REPLACE TEMP TABLE floor_ops AS
SELECT run_id, rank, tid, event_id, ts_us, end_us,
       max(end_us) OVER (PARTITION BY run_id, rank, pid, tid ORDER BY ts_us, event_id
                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS earlier_end_us
FROM events WHERE ph = 'X' AND stream IS NULL AND dur_us IS NOT NULL"""


def time_floor(db: Path) -> float:
    from ctda_sql.core.connection import connect

    con = connect(db)
    con.execute(FLOOR_SQL)  # warm-up
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        con.execute(FLOOR_SQL)
        runs.append(time.perf_counter() - start)
    con.close()
    return median(runs)


def time_ours_cli(db: Path) -> float:
    start = time.perf_counter()
    subprocess.run(["ctda-sql", "analyze", "--db", str(db), "--quiet"], check=True, capture_output=True)
    return time.perf_counter() - start


def time_peer(label: str, trace: Path, step: int) -> dict:
    python = peer_python(label)
    if python is None:
        return {}
    with hta_folder([trace]) as folder:
        result = run_peer(python, folder, ["--critical-path", "0", "ProfilerStep", str(step)])
    if "critical_path_s" not in result:
        print(f"[error] {label}: {result.get('error')}", file=sys.stderr)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default="ns_resolution", help="shared trace name (default: the largest)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--step", type=int, default=1, help="HTA instance id (0 = first step)")
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    require_analyze()
    trace = traces_dir() / f"{args.trace}.json.gz"
    with tempfile.TemporaryDirectory(prefix="ctda-bench-") as folder:
        db = ingested_db(Path(folder), trace)
        time_ours(db)  # warm-up
        ours = [time_ours(db) for _ in range(args.runs)]
        cli = [time_ours_cli(db) for _ in range(args.runs)]
        floor_s = time_floor(db)
    peers = {}
    for label in PEER_VENVS if not args.no_peers else ():
        runs = [time_peer(label, trace, args.step) for _ in range(args.runs)]
        peers[label] = {key: median([r.get(key) for r in runs]) for key in ("load_s", "critical_path_s")}
    print_results(trace.name, ours, median(cli), peers, args)
    print_floor(floor_s, peers)
    return 0


def print_results(name: str, ours: list, cli_s: float | None, peers: dict, args) -> None:
    ours_s = median([t for t, _ in ours])
    windows = ours[0][1]["windows"]
    per_window = ours_s / windows if windows else None
    print(f"analyze on {name}, median of {args.runs} runs")
    print(f"ctda-sql: {windows} windows (steps x methods), {ours[0][1]['nodes']:,} nodes; "
          f"{fmt_s(ours_s)} s in process, {fmt_s(cli_s)} s CLI, {fmt_s(per_window)} s per window")
    rows = []
    for label, times in peers.items():
        cp = times["critical_path_s"]
        rows.append([label, fmt_s(times["load_s"]), fmt_s(cp), ratio(cp, ours_s), ratio(cp, per_window)])
    if rows:
        print_table(["peer", "load s", f"1 step (#{args.step}) s", "1 step / ours all", "1 step / ours per window"], rows)



def print_floor(floor_s: float, peers: dict) -> None:
    print(f"floor: one ordered window pass over the CPU events (FLOOR_SQL) takes {fmt_s(floor_s)} s")
    for label, times in peers.items():
        cp = times["critical_path_s"]
        if cp:
            print(f"{label}: 30x one step needs <= {cp / 30:.4f} s for all steps; "
                  f"that one pass alone is {ratio(cp, floor_s)} faster than one step")


if __name__ == "__main__":
    sys.exit(main())
