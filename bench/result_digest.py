"""Dump the engine's results on every shared trace and every recorded run, so that a speed
change can be shown to change no result (issue 16: "the before/after diff of results is
empty").

Each trace (or folder of rank files) is ingested into its own database and analysed with
`--method all`; the result tables are written as sorted CSV, floats rounded to 12
significant digits (summed floats differ in their last bits between runs of the same code).
Run it on the code before and after a change, then `diff -r BEFORE AFTER`.

Usage: python bench/result_digest.py OUT_DIR [--code-dir CHECKOUT] [--only NAME ...] [--lake]
  --code-dir  run another checkout's code (e.g. `git worktree add /tmp/before HEAD~1`)
  --lake      build a Parquet lake on 2 local Dask workers instead of a database: a diff
              against a database's dump shows the lake gives the same results
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO_DIR, checkout_cli, traces_dir

TABLES = ("critical_path", "path_events", "nodes", "edges", "analysis_windows",
          "collective_instances", "cross_rank_segments")


def inputs() -> dict[str, Path]:
    """Name -> trace file or rank folder: the shared traces and tests/data's recordings."""
    found = {}
    shared = traces_dir().resolve()
    for path in sorted(shared.iterdir()):
        if path.name.endswith(".json.gz") or (path.is_dir() and any(path.glob("*.json*"))):
            found[path.name.removesuffix(".json.gz")] = path
    data = REPO_DIR / "tests" / "data"
    for path in sorted((data / "cuda").glob("*.json.gz")):
        found[f"cuda-{path.name.removesuffix('.json.gz')}"] = path
    for path in sorted((data / "gloo").iterdir()):
        found[f"gloo-{path.name}"] = path
    for path in sorted((data / "whatif").glob("*-r1.json.gz")):
        found[f"whatif-{path.name.removesuffix('.json.gz')}"] = path
    return found


def rounded_select(con, table: str) -> str:
    """SELECT * with DOUBLE columns rounded to 12 significant digits, in key order."""
    columns = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
        "ORDER BY ordinal_position", [table]).fetchall()
    shown = []
    for name, data_type in columns:
        quoted = f'"{name}"'
        if data_type == "DOUBLE":
            shown.append(f"CASE WHEN {quoted} = 0 OR NOT isfinite({quoted}) THEN {quoted} ELSE "
                         f"round({quoted}, 11 - floor(log10(abs({quoted})))::INT) END AS {quoted}")
        else:
            shown.append(quoted)
    # every column, in table order (keys first): rows with equal keys come out the same way
    return f"SELECT {', '.join(shown)} FROM {table} ORDER BY ALL"


def dump(db: Path, out: Path, code_dir: Path = REPO_DIR) -> None:
    import duckdb

    if db.is_dir():  # a lake: its views, through the checkout's own code
        sys.path.insert(0, str(code_dir))
        from ctda_sql.lake.views import open_lake

        con = open_lake(db)
    else:
        con = duckdb.connect(str(db), read_only=True)
    out.mkdir(parents=True, exist_ok=True)
    for table in TABLES:
        con.sql(rounded_select(con, table)).write_csv(str(out / f"{table}.csv"))
    con.close()


def run_cli(code_dir: Path, *args: str) -> None:
    proc = subprocess.run([*checkout_cli(code_dir), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args)} failed: {proc.stderr.strip()[-400:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--code-dir", type=Path, default=REPO_DIR)
    parser.add_argument("--only", nargs="*", help="names of inputs to dump (default: all)")
    parser.add_argument("--lake", action="store_true", help="a Parquet lake on 2 local workers, not a database")
    args = parser.parse_args()
    chosen = {k: v for k, v in inputs().items() if not args.only or k in args.only}
    with tempfile.TemporaryDirectory() as work:
        for name, path in chosen.items():
            if args.lake:
                store = Path(work) / f"{name}.lake"
                where = ("--lake", str(store), "--workers", "2")
                run_cli(args.code_dir, "ingest", "-q", str(path), "--run", name, *where)
                run_cli(args.code_dir, "analyze", "-q", "--method", "all", *where)
            else:
                store = Path(work) / f"{name}.duckdb"
                run_cli(args.code_dir, "--db", str(store), "ingest", "-q", str(path), "--run", name)
                run_cli(args.code_dir, "--db", str(store), "analyze", "-q", "--method", "all")
            dump(store, args.out_dir / name, args.code_dir)
            print(f"{name}: dumped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
