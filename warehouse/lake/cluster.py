"""The Dask side of a lake command (warehouse/lake/run.py submits the work): the Client, of a
LocalCluster or of `--scheduler`, started and stopped quietly; Ctrl-C, and the one line that
says what the lake kept."""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
from contextlib import contextmanager
from pathlib import Path

from ctda_sql.core.errors import CtdaError
from ctda_sql.core.progress import progress_bar
from ctda_sql.core.signals import sigint_deferred
from ctda_sql.core.transaction import Interrupted, is_interruption
from ctda_sql.lake import store as lake_store
from ctda_sql.lake import tasks as lake_tasks
from ctda_sql.lake.workers import check_workers

_SCHEDULER = re.compile(r"(tcp|tls|inproc|ws|wss)://[^\s/]+")


# ---- the cluster -------------------------------------------------------------------------------

# seconds to reach a scheduler and finish its handshake: once TCP connects, distributed's own
# connect timeout no longer applies, and a port that accepts and stays silent would hang forever
SCHEDULER_TIMEOUT_S = 20.0


class LakeInterrupted(Interrupted):
    """Ctrl-C during a lake command, with the one line that says what the lake kept."""

    def __init__(self, message: str, saved: bool = False):
        KeyboardInterrupt.__init__(self, message)
        self.saved = saved


UNCHANGED = "interrupted; the lake is unchanged"


def _connect_scheduler(scheduler: str):
    """A Client of the scheduler at `scheduler`, or one CtdaError line: refused at once (not
    after the connect timeout), nothing that answers as a scheduler within
    SCHEDULER_TIMEOUT_S, or any other failure of distributed (tls:// without certificates, a
    port that speaks another protocol: a 3 EiB allocation)."""
    import socket
    import threading

    from distributed import Client

    if not _SCHEDULER.fullmatch(scheduler):
        raise CtdaError(f"--scheduler {scheduler!r} must look like tcp://HOST:PORT")
    protocol, _, address = scheduler.partition("://")
    if protocol == "inproc":
        raise CtdaError(f"--scheduler {scheduler}: an inproc:// scheduler lives in another process's memory; "
                        "give the tcp:// address of a running `dask scheduler`")
    host, _, port = address.rpartition(":")
    if protocol in ("tcp", "tls") and host and port.isdigit():
        try:  # a refused port or an unknown host fails here at once
            socket.create_connection((host.strip("[]"), int(port)), timeout=SCHEDULER_TIMEOUT_S).close()
        except OSError as exc:
            raise CtdaError(f"cannot reach the Dask scheduler at {scheduler}: {exc.strerror or exc}") from None
    outcome: dict = {}

    def connect() -> None:
        try:
            outcome["client"] = Client(scheduler, timeout=f"{SCHEDULER_TIMEOUT_S}s")
        except BaseException as exc:  # noqa: BLE001 (handed to the waiting thread)
            outcome["error"] = exc

    with _quiet_dask():  # distributed logs what it could not read before it raises
        waiting = threading.Thread(target=connect, name="ctda-scheduler-connect", daemon=True)
        waiting.start()
        waiting.join(SCHEDULER_TIMEOUT_S)
    if waiting.is_alive() or isinstance(outcome.get("error"), TimeoutError):
        raise CtdaError(f"no Dask scheduler answered at {scheduler} within {SCHEDULER_TIMEOUT_S:g} s "
                        "(is it a `dask scheduler` port?)")
    error = outcome.get("error")
    if isinstance(error, MemoryError):  # a frame length read from another protocol's bytes
        raise CtdaError(f"cannot use {scheduler} as a Dask scheduler: what it sent is not Dask's protocol")
    if error is not None:
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CtdaError(f"cannot use {scheduler} as a Dask scheduler: {text}") from None
    return outcome["client"]


@contextmanager
def _quiet_dask(loggers: tuple[str, ...] = ("distributed", "asyncio", "tornado")):
    """distributed's, tornado's and asyncio's log lines held back: what a stopped cluster or a
    failed connection logs (tasks never retrieved, comms closed) is no news to the user. After
    a Ctrl-C they stay held: the event loop's thread logs what the interruption broke (a sync
    call's cancel that fails in distributed) while this thread is still unwinding, and
    asyncio logs the tasks it dropped when Python collects them, at exit."""
    held = [logging.getLogger(name) for name in loggers]
    levels = [logger.level for logger in held]
    for logger in held:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    except BaseException as exc:
        if not is_interruption(exc):
            _restore(held, levels)
        raise
    _restore(held, levels)


def _restore(loggers: list[logging.Logger], levels: list[int]) -> None:
    for logger, level in zip(loggers, levels):
        logger.setLevel(level)


def _forkserver_deaf_to_ctrl_c() -> None:
    """Start the forkserver the workers fork from with Ctrl-C ignored, which they inherit: a
    terminal's Ctrl-C goes to the whole process group, and workers that took it would print
    their tracebacks; this process alone handles it and closes them."""
    import signal
    import threading
    from multiprocessing import forkserver

    from distributed.utils import get_mp_context

    get_mp_context()  # distributed's preload, before the server starts
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (and only it gets Ctrl-C)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # for the fork and exec only
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def dask_client(workers: int | None = None, scheduler: str | None = None):
    """A Client of the cluster at `scheduler`, else of a new LocalCluster of `workers`
    processes (default: the machine's cores), one thread each. A Ctrl-C that the work did
    not report itself (before the lake was locked) leaves the lake unchanged."""
    try:  # the event loop's own lines (tornado, asyncio) are never news to the user
        with _quiet_dask(("asyncio", "tornado")), _client(workers, scheduler) as client:
            yield client
    except BaseException as exc:
        if is_interruption(exc) and not isinstance(exc, LakeInterrupted):
            raise LakeInterrupted(UNCHANGED) from None
        raise


@contextmanager
def _client(workers: int | None, scheduler: str | None):
    import dask
    from distributed import Client, LocalCluster

    if scheduler is not None:
        client = _connect_scheduler(scheduler)
        with _closing(client.close):
            yield client
        return
    check_workers(workers)
    # forkserver where there is one (not on Windows): the workers fork from a fresh
    # interpreter that imported distributed once (never from this process, whose DuckDB may
    # hold threads), and they exit ~0.2 s sooner at close than spawned ones
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    # a Ctrl-C while the workers start waits for them (~1 s), then closes them: one broken off
    # would leave workers half started, and distributed's exit hook fails on them with a traceback
    with dask.config.set({"distributed.worker.multiprocessing-method": method}), \
            sigint_deferred(raise_at_end=False) as ctrl_c:
        if method == "forkserver":
            _forkserver_deaf_to_ctrl_c()
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                               dashboard_address=":0", silence_logs=logging.ERROR)
    with _closing(cluster.close):
        with sigint_deferred(raise_at_end=False) as ctrl_c_meanwhile:
            client = Client(cluster)
        with _closing(client.close):
            if ctrl_c or ctrl_c_meanwhile:
                raise KeyboardInterrupt
            yield client


@contextmanager
def _closing(close):
    """Call `close` (of a client or cluster) when the block ends, with Ctrl-C held until that is
    done: quietly after a failure or Ctrl-C; a Ctrl-C during the close of complete work says
    it is kept."""
    try:
        yield
    except BaseException:
        with sigint_deferred(raise_at_end=False), _quiet_dask():
            close()
        raise
    with sigint_deferred(raise_at_end=False) as ctrl_c:
        close()
    if ctrl_c:
        raise LakeInterrupted("interrupted after the work was saved", saved=True)


def stop_on_interruption(client, exc: BaseException) -> None:
    """After Ctrl-C, before the client cleans up and says what the lake kept: a LocalCluster's
    workers end now, so that no task publishes anything after that; a cluster of
    --scheduler's is left to finish the tasks it runs (Python cannot stop them), the rest are
    released. A second Ctrl-C waits for this."""
    if not is_interruption(exc):
        return
    with sigint_deferred(raise_at_end=False), _quiet_dask():
        if getattr(client, "cluster", None) is not None:
            client.cluster.close()
        else:
            client.cancel(list(client.futures.values()), force=True)


class Published:
    """Which ranks' partitions of `tables` a command replaced or added: the lake's files
    before, compared with after."""

    def __init__(self, root: Path, tables: tuple[str, ...], runs: list[str]):
        self.root, self.tables, self.runs = root, tables, runs
        self.before = self._files()

    def _files(self) -> dict[tuple[str, int, Path], tuple[int, int]]:
        """(run, rank, file) -> the file's identity, for the listed runs' rank partitions."""
        found = {}
        for table in self.tables:
            for run in self.runs:
                for rank in lake_store.ranks_of(self.root, table, run):  # not an orphan like rank=abc
                    for path in lake_store.partition_files(self.root, table, run, rank):
                        try:
                            stat = path.stat()
                        except OSError:
                            continue
                        found[(run, rank, path)] = (stat.st_ino, stat.st_mtime_ns)
        return found

    def ranks(self) -> dict[str, list[int]]:
        """run name -> the ranks with a new or replaced partition file."""
        changed: dict[str, set[int]] = {}
        for (run, rank, path), identity in self._files().items():
            if self.before.get((run, rank, path)) != identity:
                changed.setdefault(run, set()).add(rank)
        return {run: sorted(ranks) for run, ranks in sorted(changed.items())}


def ranks_text(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def still_running(client) -> str:
    if getattr(client, "cluster", None) is not None:
        return ""
    return "; tasks that were running on the cluster may still publish theirs"


def threads_per_task(client, tasks: int | None = None) -> int:
    """DuckDB threads for each of `tasks` tasks (default: as many as there are workers) that
    run at once: the cores shared by the tasks that can run side by side. A run's lone
    cross-rank task gets every core rather than one while the other workers idle."""
    workers = len(client.scheduler_info().get("workers", {})) or 1
    side_by_side = max(1, min(workers, tasks if tasks is not None else workers))
    return max(1, (os.cpu_count() or 1) // side_by_side)


def gather_results(futures, label: str, visible: bool) -> list:
    """Results in submission order, with a tasks-done bar; the first failure cancels the rest
    and becomes a CtdaError."""
    from distributed import as_completed

    index = {future.key: i for i, future in enumerate(futures)}
    results: list = [None] * len(futures)
    with progress_bar(label, len(futures), visible) as advance:
        for future in as_completed(futures):
            result = future.result()
            if isinstance(result, lake_tasks.TaskFailure):
                for other in futures:
                    other.cancel()
                raise CtdaError(result.message)
            results[index[future.key]] = result
            advance()
    return results


@contextmanager
def file_errors(root: Path):
    """A lake the process cannot write or read (read-only, a file where a folder should be) as
    one line naming the path."""
    try:
        yield
    except (ConnectionError, TimeoutError):
        raise  # the cluster's, not the lake's
    except OSError as exc:
        where = exc.filename or root
        raise CtdaError(f"lake {root}: {exc.strerror or exc}: {where}") from None

