"""CPCR per step of every shared and recorded trace, as JSON lines: one line per run, method,
rank and step. Run it with two installs of ctda_sql (say, before and after a change to the
engine) and compare the two files with `--compare`:

    python scripts/cpcr_table.py --traces ../shared/traces --out after.jsonl
    PYTHONPATH=/tmp/old_install python scripts/cpcr_table.py --traces ../shared/traces --out before.jsonl
    python scripts/cpcr_table.py --compare before.jsonl after.jsonl > docs/cpcr_before_after.md

A run is one file, or one folder whose files are the ranks of one job (a multi-rank run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "tests" / "data"
NOT_TRACES = {"result_digests.json", "summary.json"}


def trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz"))
                  and p.name not in NOT_TRACES)


def runs_under(root: Path, label: str) -> list[tuple[str, list[Path]]]:
    """(run name, files): a folder with several trace files and no subfolder is one job of
    several ranks; elsewhere each file is a run of its own."""
    runs = []
    for folder in sorted({p.parent for p in root.rglob("*.json*")}):
        files = trace_files(folder)
        if not files:
            continue
        name = f"{label}/{folder.relative_to(root)}".rstrip("/.")
        is_job = len(files) > 1 and not any(p.is_dir() for p in folder.iterdir()) and _rank_files(files)
        if is_job:
            runs.append((name, files))
        else:
            runs.extend((f"{name}/{p.name.split('.')[0]}", [p]) for p in files)
    return runs


def _rank_files(files: list[Path]) -> bool:
    return all("rank" in p.name or p.name[:1].isdigit() or "worker" in p.name for p in files)


def measure(runs: list[tuple[str, list[Path]]], out) -> None:
    from ctda_sql import Warehouse  # the install under test: PYTHONPATH picks it

    for name, files in runs:
        with tempfile.TemporaryDirectory() as tmp, Warehouse(Path(tmp) / "w.duckdb") as wh:
            try:
                wh.ingest([str(p) for p in files], run=name)
                wh.analyze(run=name)
                rows = (wh.report("cpcr", run=name, top=1_000_000)
                        .project("method, rank, step, cpcr").order("ALL").fetchall())
            except Exception as error:  # a run the old engine cannot read is a row, not a stop
                out.write(json.dumps({"run": name, "error": str(error).splitlines()[0]}) + "\n")
                continue
            for method, rank, step, cpcr in rows:
                out.write(json.dumps({"run": name, "method": method, "rank": rank, "step": step,
                                      "cpcr": round(float(cpcr), 4)}) + "\n")
        out.flush()
        print(name, file=sys.stderr)



def compare(before: Path, after: Path) -> str:
    def load(path):
        table = {}
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "error" in row:
                table.setdefault((row["run"], "error"), []).append(row["error"])
                continue
            table.setdefault((row["run"], row["method"]), []).append((row["rank"], row["step"], row["cpcr"]))
        return table

    old, new = load(before), load(after)
    lines = ["| run | method | steps | CPCR before (min / median) | CPCR after (min / median) | steps < 0.8 before → after |",
             "| --- | --- | --- | --- | --- | --- |"]
    for key in sorted(set(old) | set(new)):
        run, method = key
        if method == "error":
            continue
        a, b = old.get(key, []), new.get(key, [])
        lines.append(f"| {run} | {method} | {len(b) or len(a)} | {_summary(a)} | {_summary(b)} | "
                     f"{sum(c < 0.8 for *_, c in a) if a else '—'} → {sum(c < 0.8 for *_, c in b) if b else '—'} |")
    return "\n".join(lines) + "\n"


def _summary(rows) -> str:
    if not rows:
        return "—"
    values = [c for *_, c in rows]
    return f"{min(values):.2f} / {statistics.median(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, help="the shared traces folder (../shared/traces)")
    parser.add_argument("--out", type=Path, help="JSON lines to write")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        sys.stdout.write(compare(*args.compare))
        return
    runs = runs_under(RECORDED, "recorded")
    if args.traces:
        runs = runs_under(args.traces, "shared") + runs
    with open(args.out, "w") as out:
        measure(runs, out)


if __name__ == "__main__":
    main()
