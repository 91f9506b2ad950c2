"""How long `advise` takes, and where: one run per target, ingested and analysed into a fresh
database, then `advise` (persist off) timed whole, with the number of replays it ran (one
unchanged, one per finding and two per profile region) and the time per replay.

    python bench/bench_advise.py [--targets nccl nccl200k] [--work-dir DIR] [--json FILE]

nccl200k is the shared nccl trace tiled to ~200k events (bench_job.py's target_file)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_job import target_file  # noqa: E402

import ctda_sql.whatif.replay as replay  # noqa: E402
from ctda_sql.advice.advise import advise  # noqa: E402
from ctda_sql.api import Warehouse  # noqa: E402


def measure(trace: Path, work: Path) -> dict:
    calls = {"replays": 0}
    original = replay._replay

    def counted(*args, **kwargs):
        calls["replays"] += 1
        return original(*args, **kwargs)

    replay._replay = counted
    try:
        with Warehouse(work / f"{trace.parent.name}-{trace.name}.duckdb") as wh:
            result = wh.ingest([trace], run="bench", show_progress=False)
            events = sum(int(line.split(" events")[0].rsplit(" ", 1)[-1].replace(",", ""))
                         for line in result.loaded if " events" in line)
            wh.analyze(run="bench")
            started = time.perf_counter()
            document = advise(wh.con, run="bench", persist=False)
            seconds = time.perf_counter() - started
    finally:
        replay._replay = original
    return {"events": events, "steps": document["steps"], "findings": len(document["findings"]),
            "profile": len(document["profile"]), "replays": calls["replays"], "advise_s": round(seconds, 2),
            "per_replay_s": round(seconds / max(calls["replays"], 1), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", default=["nccl", "nccl200k"])
    parser.add_argument("--work-dir", help="keep the databases and the tiled trace here")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in args.targets:
            rows[name] = measure(target_file(name, work), work)
            print(name, rows[name], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
