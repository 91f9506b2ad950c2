"""The `--lake DIR` options of ingest, analyze, report, query and shell (the commands run on
`Warehouse(lake=...)`, a Hive-partitioned Parquet lake with ingest and analyze on Dask;
docs/scale-out.md)."""

from __future__ import annotations


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
