"""The `--lake DIR` options of ingest, analyze, report, query and shell (the commands run on
`Warehouse(lake=...)`, a Hive-partitioned Parquet lake with ingest and analyze on Dask;
docs/scale-out.md)."""

from __future__ import annotations

from ctda_sql.lake.workers import MAX_WORKERS_PER_CORE, check_workers, max_workers

LAKE_HELP = "use a Parquet lake folder instead of the database file (docs/scale-out.md)"


def add_lake_option(parser, distributed: bool = False, help: str = LAKE_HELP) -> None:
    parser.add_argument("--lake", metavar="DIR", help=help)
    if distributed:
        parser.add_argument("--workers", type=int, metavar="N",
                            help="with --lake: Dask worker processes to start, from 1 to "
                                 f"{MAX_WORKERS_PER_CORE} per core ({max_workers()} here; default: the "
                                 "machine's cores)")
        parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                            help="with --lake: run on this existing Dask cluster instead")


def check_no_distribution_without_lake(args) -> None:
    """--workers and --scheduler only with --lake, and --workers within its bound, checked
    before any work starts."""
    from ctda_sql.core.errors import CtdaError

    if getattr(args, "lake", None) is None and (getattr(args, "workers", None) is not None
                                                or getattr(args, "scheduler", None) is not None):
        raise CtdaError("--workers and --scheduler need --lake DIR")
    check_workers(getattr(args, "workers", None))
