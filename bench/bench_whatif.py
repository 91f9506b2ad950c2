"""What-if speed: `whatif()` over every step of a synthesized multi-rank job (bench/synth.py;
default 16 ranks x ~500k events), next to `analyze()` on the same database.

Reports analyze's time, then the what-if's (an unchanged replay plus one scenario, so two
replays: the SQL preparation and the numpy forward pass each time) and the ratio.
Target (issue 12): a what-if over every step of the 16 x 500k job under 5 s.

Usage: python bench/bench_whatif.py [--ranks 16] [--events 500000] [--job-dir DIR] [--runs 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench_scale import add_job_arguments, prepare_job
from common import fmt_s, median, print_table

TARGET_S = 5.0


def main() -> int:
    from warehouse.analyze import analyze
    from warehouse.connection import connect
    from warehouse.ingest import ingest
    from warehouse.whatif import Scale, Scenario, whatif

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(parser)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    job_dir, _, events = prepare_job(args)
    con = connect(Path(tempfile.mkdtemp(prefix="ctda-whatif-")) / "whatif.duckdb")
    ingest(con, [job_dir], run_name="scale", show_progress=False)
    started = time.perf_counter()
    analyze(con, method="ctda", show_progress=False)
    analyze_s = time.perf_counter() - started
    scenario = Scenario(scales=(Scale("*gemm*", 0.5, "kernel"),), bandwidth_scale=2.0)
    times = []
    for _ in range(args.runs):
        started = time.perf_counter()
        steps = whatif(con, scenario=scenario, persist=True).steps
        times.append(time.perf_counter() - started)
    nodes = con.execute("SELECT count(*) FROM nodes WHERE method = 'ctda'").fetchone()[0]
    whatif_s = median(times)
    print(f"{args.ranks} ranks, {events:,} events, {len(steps)} steps, {nodes:,} nodes")
    print_table(["stage", "time", "target"], [
        ["analyze (ctda)", fmt_s(analyze_s), ""],
        ["whatif (replay + scenario, persisted)", fmt_s(whatif_s), f"< {TARGET_S:.0f} s: "
         + ("met" if whatif_s < TARGET_S else "MISSED")],
        ["whatif / analyze", f"{whatif_s / analyze_s:.2f}", ""],
    ])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
