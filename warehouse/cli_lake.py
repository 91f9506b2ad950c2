"""`--lake DIR` on ingest, analyze, report and query: the same commands on a Hive-partitioned
Parquet lake, with ingest and analyze distributed on Dask (docs/scale-out.md)."""

from __future__ import annotations

import sys


def add_lake_option(parser, distributed: bool = False) -> None:
    parser.add_argument("--lake", metavar="DIR",
                        help="use a Parquet lake folder instead of the database file (docs/scale-out.md)")
    if distributed:
        parser.add_argument("--workers", type=int, metavar="N",
                            help="with --lake: Dask worker processes to start (default: the machine's cores)")
        parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                            help="with --lake: run on this existing Dask cluster instead")


def check_no_distribution_without_lake(args) -> None:
    from .errors import CtdaError

    if getattr(args, "lake", None) is None and (getattr(args, "workers", None) is not None
                                                or getattr(args, "scheduler", None) is not None):
        raise CtdaError("--workers and --scheduler need --lake DIR")


def cmd_ingest(args, meta: dict) -> int:
    from .lake_run import dask_client, ingest_lake

    with dask_client(args.workers, args.scheduler) as client:
        result = ingest_lake(client, args.lake, args.paths, run=args.run, meta=meta, replace=args.replace,
                             show_progress=not args.quiet)
    for line in result.loaded:
        print(f"ingested {line}")
    for line in result.skipped + result.warnings:
        print(f"warning: {line}", file=sys.stderr)
    print(f"run {result.run_name!r}: {len(result.loaded)} loaded, {len(result.skipped)} skipped")
    return 0


def cmd_analyze(args, settings) -> int:
    from .lake_run import dask_client, analyze_lake

    with dask_client(args.workers, args.scheduler) as client:
        print(analyze_lake(client, args.lake, run=args.run, method=args.method, window=args.window,
                           settings=settings, show_progress=not args.quiet))
    return 0


def open_for(args, sql: str):
    """The in-memory warehouse over the lake, for one query or report."""
    from .lake import open_lake

    return open_lake(args.lake, for_sql=sql, safe=getattr(args, "safe", False))
