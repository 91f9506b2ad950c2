"""Interruption trials on a real trace: Ctrl-C (SIGINT to the process group) at evenly spaced
points of ingest and analyze, and SIGKILL during ingest; counts the clean outcomes.

Clean Ctrl-C: exit 130, one `interrupted` line, no traceback, and the database equal to the
state before or after the complete command. Clean SIGKILL: the next ingest leaves no
`ctda-parse-*` folder in the temp folder.

Usage: python bench/interrupt_trials.py [--trials 20] [--trace ns_resolution.json.gz]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ctda_sql.core.connection import connect

from common import traces_dir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_bad_input import console_script  # noqa: E402
from test_interrupts import assert_interrupted, run_with_sigint, state, timed_run  # noqa: E402


def ctrl_c_trials(start: Path, done: Path, args: list[str], seconds: float, trials: int) -> dict:
    outcomes = {"clean": 0, "finished first": 0, "not clean": []}
    expected = (state(start), state(done))
    for trial in range(trials):
        db = start.with_name(f"trial-{trial}.duckdb")
        db.write_bytes(start.read_bytes())
        result, _ = run_with_sigint(db, args, seconds * trial / trials)
        try:
            if result.returncode == 0:
                outcomes["finished first"] += 1
                continue
            assert_interrupted(result)
            assert state(db) in expected
            outcomes["clean"] += 1
        except AssertionError as exc:
            outcomes["not clean"].append((trial, result.returncode, result.stderr[-200:], str(exc)[:100]))
        finally:
            db.unlink(missing_ok=True)
    return outcomes


def sigkill_trials(trace: Path, folder: Path, trials: int) -> dict:
    temp = folder / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    left, cleaned = 0, 0
    for trial in range(trials):
        db = folder / f"kill-{trial}.duckdb"
        process = subprocess.Popen([console_script(), "--db", str(db), "ingest", "-q", str(trace)],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3 + 0.1 * trial)
        process.send_signal(signal.SIGKILL)
        process.wait()
        left += bool(list(temp.glob("ctda-parse-*")))
        other = folder / f"next-{trial}.duckdb"
        subprocess.run([console_script(), "--db", str(other), "ingest", "-q", str(trace)], env=env,
                       capture_output=True, check=True)
        cleaned += not list(temp.glob("ctda-parse-*"))
    return {"trials": trials, "killed while a parse folder existed": left, "clean after next ingest": cleaned}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--trace", default="ns_resolution.json.gz")
    args = parser.parse_args()
    trace = traces_dir() / args.trace
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        empty, ingested, analyzed = (folder / f"{n}.duckdb" for n in ("empty", "ingested", "analyzed"))
        connect(empty).close()  # the schema, no runs
        ingest_args = ["ingest", "-q", str(trace), "--run", "trial"]
        ingest_s = timed_run(empty, ingested, ingest_args)
        analyze_s = timed_run(ingested, analyzed, ["analyze", "-q"])
        print(f"{trace.name}: ingest {ingest_s:.2f} s, analyze {analyze_s:.2f} s after the database is open")
        print("ctrl-c during ingest:", ctrl_c_trials(empty, ingested, ingest_args, ingest_s, args.trials))
        print("ctrl-c during analyze:", ctrl_c_trials(ingested, analyzed, ["analyze", "-q"], analyze_s, args.trials))
        print("sigkill during ingest:", sigkill_trials(trace, folder, max(1, args.trials // 2)))


if __name__ == "__main__":
    main()
