"""Opening a warehouse end to end: `ctda-sql report NAME` / `query` wall time on a small run,
beside the floors (interpreter start; python + `import duckdb` + connect + the same query).

    python bench/bench_open.py [--trace nccl] [--runs 7] [--code-dir DIR]

--code-dir runs the CLI from another checkout (e.g. `git archive main | tar -x -C DIR`), so a
before/after pair is measured in the same run, interleaved. Target (issue 16): < 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO_DIR, checkout_cli, traces_dir  # noqa: E402

FLOOR = ("import sys, duckdb; con = duckdb.connect(sys.argv[1], read_only=True); "
         "con.execute('SELECT * FROM runs').fetchall()")


def wall(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    # cwd outside any checkout: `python -c` puts the cwd first on sys.path
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=tempfile.gettempdir())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="nccl")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--code-dir", action="append", default=[],
                        help="another checkout to time beside this one (repeatable)")
    args = parser.parse_args()
    trace = traces_dir() / f"{args.trace}.json.gz"
    with tempfile.TemporaryDirectory(prefix="ctda-bench-open-") as folder:
        db = Path(folder) / "small.duckdb"
        env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
        subprocess.run([*checkout_cli(REPO_DIR), "--db", str(db), "ingest", "-q", str(trace)],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([*checkout_cli(REPO_DIR), "--db", str(db), "analyze", "-q"],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        code_dirs = {"this checkout": REPO_DIR, **{str(d): Path(d).resolve() for d in args.code_dir}}
        commands = {
            "report runs": ["report", "runs"],
            "report cpcr": ["report", "cpcr"],
            'query "select 1"': ["query", "select 1"],
        }
        cases: dict[str, tuple[list[str], dict]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], env),
            "floor: python + duckdb connect + query": ([sys.executable, "-c", FLOOR, str(db)], env),
        }
        for label, code_dir in code_dirs.items():
            for name, cli_args in commands.items():
                cases[f"{name} ({label})"] = ([*checkout_cli(code_dir), "--db", str(db), *cli_args], env)
        times: dict[str, list[float]] = {case: [] for case in cases}
        for _ in range(args.runs):  # interleaved, so load beside us hits every case alike
            for case, (argv, case_env) in cases.items():
                times[case].append(wall(argv, case_env))
    width = max(map(len, cases))
    print(f"{'case':<{width}}  median s  min s")
    for case, values in times.items():
        print(f"{case:<{width}}  {statistics.median(values):8.3f}  {min(values):5.3f}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
