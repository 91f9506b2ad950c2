"""Ingest speed: ctda-sql vs HTA's TraceAnalysis load, on the large shared traces.

For each target (nccl, ns_resolution, the two_ranks folder):
  ours          warehouse.ingest.ingest() into a fresh temp database, in this process
                (connect() and imports not counted, as HTA's imports are not counted)
  ours CLI      `ctda-sql --db TMP ingest PATH` wall time, interpreter start included
  HTA / traceinsight   TraceAnalysis(trace_dir=...) load only, in the peer venv
Medians over --runs runs; the ratio column is peer time / ours.

Usage: python bench/bench_ingest.py [--runs 5] [--targets nccl ns_resolution two_ranks] [--no-peers]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PEER_VENVS, fmt_s, hta_folder, median, peer_python, print_table, ratio, run_peer, traces_dir

DEFAULT_TARGETS = ("nccl", "ns_resolution", "two_ranks")


def target_path(folder: Path, name: str) -> Path:
    for candidate in (folder / f"{name}.json.gz", folder / f"{name}.json", folder / name):
        if candidate.exists():
            return candidate
    sys.exit(f"no trace named {name} in {folder}")


def target_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
    return [path]


def time_ours_in_process(path: Path) -> float:
    from ctda_sql.core.connection import connect
    from ctda_sql.ingest.load import ingest

    with tempfile.TemporaryDirectory(prefix="ctda-bench-") as folder:
        con = connect(Path(folder) / "bench.duckdb")
        start = time.perf_counter()
        ingest(con, [path], show_progress=False)
        elapsed = time.perf_counter() - start
        con.close()
    return elapsed


def time_ours_cli(path: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="ctda-bench-") as folder:
        command = ["ctda-sql", "ingest", "--db", str(Path(folder) / "bench.duckdb"), "--quiet", str(path)]
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        return time.perf_counter() - start


def time_floor(path: Path) -> dict:
    """What any DuckDB-backed ingest of this file must spend, with nothing of ours around it:
    gunzip + locate traceEvents, then DuckDB's typed read_json of the events (name, cat, ph,
    ts, dur, pid, tid, args as JSON) into an on-disk table, then COMMIT."""
    import duckdb
    import msgspec
    from isal import igzip

    with tempfile.TemporaryDirectory(prefix="ctda-bench-floor-") as folder:
        start = time.perf_counter()
        data = path.read_bytes()
        text = igzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        events = msgspec.json.decode(text, type=dict[str, msgspec.Raw])["traceEvents"]
        events_file = Path(folder) / "events.json"
        events_file.write_bytes(bytes(events))
        unpacked = time.perf_counter() - start
        con = duckdb.connect(str(Path(folder) / "floor.duckdb"))
        start = time.perf_counter()
        con.execute("BEGIN")
        con.execute(
            "CREATE TABLE events AS SELECT * FROM read_json(?, format = 'array', columns = {name: 'VARCHAR', "
            "cat: 'VARCHAR', ph: 'VARCHAR', ts: 'DECIMAL(38, 6)', dur: 'DOUBLE', pid: 'VARCHAR', "
            "tid: 'VARCHAR', args: 'JSON'}, maximum_object_size = 1073741824)", [str(events_file)])
        con.execute("COMMIT")
        loaded = time.perf_counter() - start
        con.close()
    return {"unpack_s": unpacked, "floor_s": unpacked + loaded}


def time_peer(label: str, files: list[Path]) -> float | None:
    python = peer_python(label)
    if python is None:
        return None
    with hta_folder(files) as folder:
        result = run_peer(python, folder)
    if "load_s" not in result:
        print(f"[error] {label}: {result.get('error')}", file=sys.stderr)
        return None
    return result["load_s"]


def bench_target(path: Path, runs: int, peers: bool) -> dict:
    files = target_files(path)
    time_ours_in_process(path)  # warm-up: page cache, lazy imports
    ours = [time_ours_in_process(path) for _ in range(runs)]
    cli = [time_ours_cli(path) for _ in range(runs)]
    result = {"target": path.name, "events": count_events(files), "ours_s": median(ours), "cli_s": median(cli)}
    floors = [sum(time_floor(f)["floor_s"] for f in files) for _ in range(runs)]
    result["floor_s"] = median(floors)
    for label in PEER_VENVS if peers else ():
        result[label] = median([time_peer(label, files) for _ in range(runs)])
    return result


def count_events(files: list[Path]) -> int:
    from ctda_sql.ingest.traceio import read_trace

    return sum(read_trace(f).event_count for f in files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--targets", nargs="+", default=list(DEFAULT_TARGETS))
    parser.add_argument("--no-peers", action="store_true", help="skip HTA and traceinsight")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args()
    folder = traces_dir()
    results = [bench_target(target_path(folder, t), args.runs, not args.no_peers) for t in args.targets]
    print_results(results, args.runs)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def print_results(results: list[dict], runs: int) -> None:
    peers = [label for label in PEER_VENVS if any(label in r for r in results)]
    headers = ["target", "events", "floor s", "ours s", "ours ev/s", "CLI s"]
    for label in peers:
        headers += [f"{label} s", f"{label}/ours"]
    rows = []
    for r in results:
        row = [r["target"], f"{r['events']:,}", fmt_s(r["floor_s"]), fmt_s(r["ours_s"]),
               f"{r['events'] / r['ours_s']:,.0f}", fmt_s(r["cli_s"])]
        for label in peers:
            row += [fmt_s(r.get(label)), ratio(r.get(label), r["ours_s"])]
        rows.append(row)
    print(f"ingest, median of {runs} runs (ratio = peer load time / ctda-sql ingest time)")
    print_table(headers, rows)
    print("floor = gunzip + locate traceEvents + DuckDB typed read_json into an on-disk table + COMMIT, "
          "nothing else (no validation, no exact-ts checks, no extra keys, no threads/steps)")
    for r in results:
        hta = r.get("HTA 0.5.0")
        if hta:
            print(f"{r['target']}: 8x HTA 0.5.0 needs <= {hta / 8:.3f} s; floor alone is {r['floor_s']:.3f} s "
                  f"= {hta / r['floor_s']:.1f}x HTA")


if __name__ == "__main__":
    sys.exit(main())
