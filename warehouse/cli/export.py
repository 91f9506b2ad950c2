"""`ctda-sql export overlay|html`: the critical path as a trace for Perfetto, or as an HTML
report. Thin: options go straight to warehouse.Warehouse."""

from __future__ import annotations

import argparse

from ctda_sql.api import Warehouse
from ctda_sql.cli.lake import add_lake_option
from ctda_sql.core.connection import resolve_db_path


def _reader(args) -> Warehouse:
    """The lake's views (--lake) or the database, read-only."""
    if getattr(args, "lake", None) is not None:
        return Warehouse(lake=args.lake, read_only=True, udfs_for="")
    return Warehouse(resolve_db_path(args.db), read_only=True, udfs_for="")


def cmd_export_overlay(args) -> int:
    with _reader(args) as wh:
        done = wh.export_overlay(args.output, run=args.run, rank=args.rank, methods=[args.method])
    ranks = ", ".join(map(str, done["ranks"]))
    print(f"wrote {done['path']}: run {done['run']!r} rank(s) {ranks}, {done['events']:,} events "
          f"+ {done['added']:,} for the {' and '.join(done['methods'])} path")
    print("open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing")
    return 0


def cmd_export_html(args) -> int:
    with _reader(args) as wh:
        done = wh.export_html(args.output, run=args.run, step=args.step, rank=args.rank, compare=args.compare)
    print(f"wrote {done['path']}: run {done['run']!r}, {done['charts']} charts "
          f"(Gantt of rank {done['gantt_rank']} step {done['gantt_step']}); open it in a browser")
    return 0


def add_export(sub) -> None:
    """Register `export overlay` and `export html` on the CLI's subparsers."""
    p = sub.add_parser("export", help="the critical path as a Perfetto trace or an HTML report",
                       description="Export a run's critical path: `overlay` writes its trace with "
                                   "the path marked (Perfetto UI, chrome://tracing), `html` one "
                                   "self-contained HTML report with plots.")
    kinds = p.add_subparsers(dest="export_kind", metavar="KIND", required=True)
    overlay = kinds.add_parser(
        "overlay", help="the trace with the critical path marked, for Perfetto / chrome://tracing",
        description="Copy the run's trace files with HTA's marks: every input event as its file "
                    "holds it (same name, ph, ts, dur, pid, tid and args), args.critical = 1 on "
                    "events with counted time on the path, critical_path flow arrows between "
                    "consecutive path nodes, and a `Critical path (METHOD)` process with one slice "
                    "per path node. All ranks in one file unless --rank is given. Needs the trace "
                    "files the run was ingested from.")
    overlay.add_argument("--run", required=True, help="run name")
    overlay.add_argument("--rank", type=int, help="one rank (default: all ranks)")
    overlay.add_argument("--method", choices=("ctda", "per_thread", "cross_rank", "all"), default="ctda",
                         help="the path to mark; all adds per_thread and cross_rank processes beside "
                              "ctda's, cross_rank draws the path across ranks with flows between them "
                              "(default: ctda)")
    _common(overlay, "FILE.json or FILE.json.gz", cmd_export_overlay)
    html = kinds.add_parser(
        "html", help="one self-contained HTML report with plots",
        description="Write one HTML file (plotly's JavaScript inlined, no network needed) with "
                    "CPCR per step, hotspots per phase, a Gantt of one step, per-rank comparison "
                    "and ctda beside per_thread.")
    html.add_argument("--run", required=True, help="run name")
    html.add_argument("--step", type=int, help="step for the Gantt chart (default: the slowest)")
    html.add_argument("--rank", type=int, help="rank for the Gantt chart (default: the slowest step's)")
    html.add_argument("--compare", metavar="RUN",
                      help="open the report with why this run's median step differs from RUN's, along the "
                           "critical paths (as `ctda-sql diff --run-a RUN --run-b THIS`)")
    _common(html, "FILE.html", cmd_export_html)


def _common(parser, output_help: str, handler) -> None:
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help=output_help)
    # accepted after the command too, as everywhere: `ctda-sql export html --db x.duckdb ...`
    parser.add_argument("--db", default=argparse.SUPPRESS, help="database file")
    add_lake_option(parser)
    parser.set_defaults(handler=handler)
