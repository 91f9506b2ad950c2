"""What-if speed: `whatif()` over every step of a synthesized multi-rank job (bench/synth.py;
default 16 ranks x ~500k events), next to `analyze()` on the same database.

Reports analyze's time, then the what-if's (an unchanged replay plus one scenario, so two
replays: the SQL preparation and the numpy forward pass each time) and the ratio.
Target (issue 12): a what-if over every step of the 16 x 500k job under 5 s.

With --coupled the collectives are matched across ranks first (analyze's cross_rank
matching), so the replay couples the ranks (docs/whatif.md, "Several ranks"). --db keeps the
analysed database and reuses it next time (analyze's time is then not measured); --profile
prints cProfile's top functions of one what-if.

Usage: python bench/bench_whatif.py [--ranks 16] [--events 500000] [--job-dir DIR] [--runs 3]
                                    [--db PATH] [--coupled] [--profile]
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
    from ctda_sql.core.connection import connect
    from ctda_sql.engine.analyze import analyze
    from ctda_sql.ingest.load import ingest
    from ctda_sql.whatif.replay import Scale, Scenario, whatif

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(parser)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--db", help="analysed database to keep and reuse")
    parser.add_argument("--coupled", action="store_true", help="match collectives first: a coupled replay")
    parser.add_argument("--profile", action="store_true", help="cProfile one what-if")
    args = parser.parse_args()
    job_dir, _, events = prepare_job(args)
    db = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="ctda-whatif-")) / "whatif.duckdb"
    reuse = db.exists()
    con = connect(db)
    analyze_s = float("nan")
    if not reuse:
        ingest(con, [job_dir], run_name="scale", show_progress=False)
        started = time.perf_counter()
        analyze(con, method="ctda", show_progress=False)
        analyze_s = time.perf_counter() - started
    if args.coupled:
        from ctda_sql.engine.crossrank import match_collectives

        match_collectives(con)
        matched = con.execute("SELECT count(*) FILTER (WHERE matched), count(*) FROM collective_instances").fetchone()
        print(f"collective instances matched: {matched[0]:,} of {matched[1]:,}")
    else:
        con.execute("DELETE FROM collective_instances")
    scenario = Scenario(scales=(Scale("*gemm*", 0.5, "kernel"),), bandwidth_scale=2.0)
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(whatif, con, scenario=scenario, persist=True)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    times = []
    for _ in range(args.runs):
        started = time.perf_counter()
        steps = whatif(con, scenario=scenario, persist=True).steps
        times.append(time.perf_counter() - started)
    nodes = con.execute("SELECT count(*) FROM nodes WHERE method = 'ctda'").fetchone()[0]
    whatif_s = median(times)
    print(f"{args.ranks} ranks, {events:,} events, {len(steps)} steps, {nodes:,} nodes, "
          f"runs: {', '.join(f'{t:.2f} s' for t in times)}")
    print_table(["stage", "time", "target"], [
        ["analyze (ctda)", fmt_s(analyze_s), ""],
        ["whatif (replay + scenario, persisted)", fmt_s(whatif_s), f"< {TARGET_S:.0f} s: "
         + ("met" if whatif_s < TARGET_S else "MISSED")],
        ["whatif / analyze", f"{whatif_s / analyze_s:.2f}" if analyze_s == analyze_s else "(analyze reused)", ""],
    ])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
