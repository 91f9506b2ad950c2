"""The `--lake DIR` options of ingest, analyze, report, query and shell (the commands run on
`Warehouse(lake=...)`, a Hive-partitioned Parquet lake with ingest and analyze on Dask;
docs/scale-out.md)."""

from __future__ import annotations

import os

# One local worker process per core is what a LocalCluster needs; this many per core is the
# most --workers starts (10,000 printed ~50k traceback lines, 1e20 met the OOM killer)
MAX_WORKERS_PER_CORE = 4


def max_workers() -> int:
    """The most local worker processes `--workers` may start on this machine."""
    return MAX_WORKERS_PER_CORE * (os.cpu_count() or 1)


def check_workers(workers) -> None:
    """One CtdaError line for a worker count that is not from 1 to max_workers()."""
    from .errors import CtdaError

    if workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise CtdaError(f"--workers must be a whole number, got {workers!r}")
    if not 1 <= workers <= max_workers():
        raise CtdaError(f"--workers must be from 1 to {max_workers()} ({MAX_WORKERS_PER_CORE} per core of "
                        f"this machine), got {workers}; use --scheduler for a larger cluster")


def add_lake_option(parser, distributed: bool = False) -> None:
    parser.add_argument("--lake", metavar="DIR",
                        help="use a Parquet lake folder instead of the database file (docs/scale-out.md)")
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
    from .errors import CtdaError

    if getattr(args, "lake", None) is None and (getattr(args, "workers", None) is not None
                                                or getattr(args, "scheduler", None) is not None):
        raise CtdaError("--workers and --scheduler need --lake DIR")
    check_workers(getattr(args, "workers", None))
