"""Where an ingest's time goes (issue 32, goal 4): `ctda-sql ingest` of one trace into a new
database, stage by stage, against the parse floor.

Each stage is the code the CLI runs, called in the same order in this process (median of
--runs; the parse stages are timed between the stages traceio.read_trace announces); `process + imports` is the wall time of a process that only imports what the ingest
command imports. The stages:
  process + imports   python start, duckdb, pyarrow/numpy, ctda_sql's ingest modules
  read + decompress   the file's bytes, gunzip (isal)
  top-level decode    msgspec splits the top-level object; traceEvents stays one raw view
  type (DuckDB JSON)  sql/ingest/typed_events.sql: one JSON parse per event, in parts
  checks              ts / dur / step-number checks, time resolution, odd fields
  open new database   connect: tables, COMMENTs and the macros ingest uses
  insert events       INSERT INTO events (sql/ingest/event_rows.sql) from the Arrow table
  derive              steps, threads and the trace row (sql/ingest/steps.sql, threads.sql)
  commit              the transaction's COMMIT (DuckDB writes and compresses the row groups)
  close               checkpoint and close
The parse floor is bench_job.py's: gunzip + a typed msgspec decode of the same bytes.

Usage: python bench/ingest_stages.py [--runs 3] [--targets nccl200k cuda_ddp ns_resolution nccl]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_job import parse_floor, target_file

from common import fmt_s, median, print_table

STAGES = ("process + imports", "read + decompress", "top-level decode", "type (DuckDB JSON)", "checks",
          "open new database", "insert events", "derive", "commit", "close")
IMPORTS = "import duckdb, ctda_sql.cli.main, ctda_sql.api, ctda_sql.ingest.load"


def imports_wall() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", IMPORTS], check=True)
    return time.perf_counter() - start


def staged_ingest(trace: Path, db: Path) -> dict[str, float]:
    """The CLI's ingest of `trace` into a new database at `db`, timed stage by stage."""
    from ctda_sql.core.connection import connect, sql_of_folders
    from ctda_sql.core.transaction import transaction
    from ctda_sql.ingest import load, traceio

    times: dict[str, float] = {}
    clock = [time.perf_counter()]

    def done(stage: str) -> None:
        now = time.perf_counter()
        times[stage] = times.get(stage, 0.0) + now - clock[0]
        clock[0] = now

    # read_trace names each stage as it begins: the time since the last one is the stage before
    finished = iter(["read + decompress", "read + decompress", "top-level decode", "type (DuckDB JSON)"])
    parsed = traceio.read_trace(trace, on_stage=lambda name, size: done(next(finished)))
    done("checks")
    warehouse = connect(db, for_sql="", macros_for=sql_of_folders("ingest", "views"))
    done("open new database")
    result = load.IngestResult(run_name="stages", run_id=0)
    with transaction(warehouse):
        run_id = load._get_or_create_run(warehouse, "stages", {}, [parsed])
        result.run_id = run_id
        load.insert_events(warehouse, [parsed], run_id)
        done("insert events")
        load.derive_trace(warehouse, parsed, run_id, result)
        load.refresh_run_meta(warehouse)
        done("derive")
    done("commit")
    warehouse.close()
    done("close")
    return times


def measure(name: str, work: Path, runs: int) -> list[list[str]]:
    trace = target_file(name, work)
    samples = []
    for _ in range(runs + 1):  # the first warms the page cache and .pyc files
        db = work / "stages.duckdb"
        for leftover in (db, Path(f"{db}.wal")):
            leftover.unlink(missing_ok=True)
        samples.append(staged_ingest(trace, db))
    stage_s = {stage: median([s[stage] for s in samples[1:]]) for stage in STAGES[1:]}
    stage_s["process + imports"] = median([imports_wall() for _ in range(runs)])
    floor = median([parse_floor(trace) for _ in range(runs)])
    total = sum(stage_s.values())
    rows = [[name, stage, fmt_s(stage_s[stage]), f"{stage_s[stage] / total:.0%}"] for stage in STAGES]
    rows.append([name, "total", fmt_s(total), f"{total / floor:.1f}x the parse floor ({fmt_s(floor)} s)"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--targets", nargs="*", default=["nccl200k", "cuda_ddp", "ns_resolution", "nccl"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctda-stages-") as tmp:
        rows = [row for name in args.targets for row in measure(name, Path(tmp), args.runs)]
    print_table(["trace", "stage", "s", "share"], rows)
    print(f"({os.cpu_count()} cores; stages in process, median of {args.runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
