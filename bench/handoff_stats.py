"""Measure device hand-offs on real traces: the evidence behind the inferred-wait rule
(docs/method.md, "Hand-offs between streams, measured").

For every device op launched from a traced CPU node, `wait_us` is how long it sat after both
its launch returned and its stream predecessor ended, and `gap_us` how long before its start
the last op launched earlier on another stream ended. Ops that did not wait (wait_us <= 2)
give the chance rate: how often an unrelated op ends that close to a start by coincidence.

Usage: python bench/handoff_stats.py [TRACE_OR_FOLDER ...]   (default: every shared trace
under $CTDA_TRACES and every CUDA recording in tests/data)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ctda_sql.core import (
    connection,
    sqlfiles,  # noqa: E402
)
from ctda_sql.core.transaction import transaction  # noqa: E402
from ctda_sql.engine import analyze
from ctda_sql.ingest import load as ingest

REPO = Path(__file__).resolve().parent.parent


def default_inputs() -> list[Path]:
    found = []
    shared = os.environ.get("CTDA_TRACES")
    if shared:
        found += sorted(p for p in Path(shared).iterdir() if p.name.endswith(".json.gz") or p.is_dir())
    found += sorted((REPO / "tests" / "data" / "cuda").glob("*.json.gz"))
    found += sorted((REPO / "tests" / "data" / "whatif").glob("gpu*-r1.json.gz"))
    return found


def pairs(path: Path) -> list[tuple]:
    """(trace, wait_us, gap_us) of every device op launched from a window's CPU node."""
    with tempfile.TemporaryDirectory() as folder:
        con = connection.connect(str(Path(folder) / "w.duckdb"))
        ingest.ingest(con, [str(path)], run_name=path.name, show_progress=False)
        with transaction(con):
            analyze.run_stages(con, None, ["ctda"])
            rows = con.execute(sqlfiles.load("analysis/handoff_pairs.sql")).fetchall()
        con.close()
    return [(path.name.removesuffix(".json.gz"),) + tuple(row) for row in rows]


def main(argv: list[str]) -> None:
    inputs = [Path(a) for a in argv] or default_inputs()
    all_pairs = [row for path in inputs for row in pairs(path)]
    con = duckdb.connect()
    con.execute("CREATE TABLE p(trace VARCHAR, wait_us DOUBLE, gap_us DOUBLE, launched_before BOOLEAN)")
    con.executemany("INSERT INTO p VALUES (?, ?, ?, ?)", all_pairs)
    print("waited ops (wait > 20 us): gap to the last earlier-launched op ending on another stream")
    print(_table(con, """
        SELECT trace, count(*) AS waited,
               count(*) FILTER (WHERE gap_us <= 15) AS le15,
               count(*) FILTER (WHERE gap_us > 15 AND gap_us <= 100) AS g15_100,
               count(*) FILTER (WHERE gap_us > 100 AND gap_us <= 1000) AS g100_1000,
               count(*) FILTER (WHERE gap_us > 1000 OR gap_us IS NULL) AS far_or_none,
               round(quantile_cont(gap_us, 0.5) FILTER (WHERE gap_us <= 100), 1) AS median_gap_near
        FROM p WHERE wait_us > 20 GROUP BY trace ORDER BY trace"""))
    print("\nchance: ops that did not wait (wait <= 2 us): share with an earlier-launched op on")
    print("another stream ending within G us before their start")
    print(_table(con, """
        SELECT trace, count(*) AS ops,
               round(avg((gap_us <= 15)::INT), 4) AS within15,
               round(avg((gap_us <= 30)::INT), 4) AS within30,
               round(avg((gap_us <= 100)::INT), 4) AS within100,
               round(avg((gap_us <= 1000)::INT), 4) AS within1000
        FROM p WHERE wait_us <= 2 AND gap_us IS NOT NULL GROUP BY trace ORDER BY trace"""))
    print("\nwaited ops by wait length: how close the nearest cause ended (gap / wait)")
    print(_table(con, """
        SELECT CASE WHEN wait_us < 100 THEN 'a 20-100 us' WHEN wait_us < 1000 THEN 'b 0.1-1 ms'
                    WHEN wait_us < 10000 THEN 'c 1-10 ms' ELSE 'd >= 10 ms' END AS wait,
               count(*) AS ops,
               count(*) FILTER (WHERE gap_us <= 15) AS le15,
               count(*) FILTER (WHERE gap_us <= 0.1 * wait_us) AS within_tenth,
               round(quantile_cont(gap_us, 0.5), 1) AS median_gap,
               round(quantile_cont(gap_us, 0.9), 1) AS p90_gap
        FROM p WHERE wait_us > 20 GROUP BY 1 ORDER BY 1"""))


def _table(con, sql: str) -> str:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    rows = [[("" if v is None else str(v)) for v in row] for row in cursor.fetchall()]
    widths = [max(len(n), *(len(r[i]) for r in rows)) if rows else len(n) for i, n in enumerate(names)]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
