"""How many local Dask worker processes a lake command may start (`--workers`); no heavy
import, so the CLI's parser can state the bound in --help."""

from __future__ import annotations

import os

# One local worker process per core is what a LocalCluster needs; this many per core is the
# most --workers starts (far more floods the terminal with tracebacks or meets the OOM killer)
MAX_WORKERS_PER_CORE = 4


def max_workers() -> int:
    """The most local worker processes `--workers` may start on this machine."""
    return MAX_WORKERS_PER_CORE * (os.cpu_count() or 1)


def check_workers(workers) -> None:
    """One CtdaError line for a worker count that is not from 1 to max_workers()."""
    from ctda_sql.core.errors import CtdaError

    if workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise CtdaError(f"--workers must be a whole number, got {workers!r}")
    if not 1 <= workers <= max_workers():
        raise CtdaError(f"--workers must be from 1 to {max_workers()} ({MAX_WORKERS_PER_CORE} per core of "
                        f"this machine), got {workers}; use --scheduler for a larger cluster")
