"""CPCR per step of every shared trace and every recorded run, for the notes' before/after
tables: `python bench/cpcr_steps.py OUT.csv [--code-dir CHECKOUT]` (CHECKOUT: another
checkout's code, e.g. `git worktree add /tmp/before HEAD~1`). Columns: trace, rank, step,
method, cpcr, queued_idle_us (empty where the code has no such column)."""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def inputs() -> list[Path]:
    found = []
    shared = os.environ.get("CTDA_TRACES")
    if shared:
        found += sorted(p for p in Path(shared).iterdir() if p.name.endswith(".json.gz") or p.is_dir())
    data = REPO / "tests" / "data"
    found += sorted((data / "cuda").glob("*.json.gz"))
    found += sorted(p for p in (data / "gloo").iterdir() if p.is_dir())
    return found


def cpcr_rows(path: Path) -> list[tuple]:
    from ctda_sql.core import connection
    from ctda_sql.engine import analyze, reports
    from ctda_sql.ingest import load as ingest

    with tempfile.TemporaryDirectory() as folder:
        con = connection.connect(str(Path(folder) / "w.duckdb"))
        ingest.ingest(con, [str(path)], run_name=path.name.removesuffix(".json.gz"), show_progress=False)
        analyze.analyze(con, show_progress=False)
        cursor = reports.run_report(con, reports.find_report("cpcr"), {"method": "ctda"})
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row)) for row in cursor.fetchall()]
        con.close()
    return [(r["run"], r["rank"], r["step"], r["method"], round(r["cpcr"], 3), r.get("queued_idle_us", ""))
            for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--code-dir", type=Path)
    args = parser.parse_args()
    if args.code_dir:
        sys.path.insert(0, str(args.code_dir.resolve()))
    else:
        sys.path.insert(0, str(REPO))
    with open(args.out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["trace", "rank", "step", "method", "cpcr", "queued_idle_us"])
        for path in inputs():
            writer.writerows(cpcr_rows(path))
            handle.flush()


if __name__ == "__main__":
    main()
