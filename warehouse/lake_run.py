"""Ingest into and analyze a lake on a Dask cluster: the client side.

The client assigns run ids and the run's time origin, submits one task per trace file
(ingest) or per (run, rank) (analyze) to Dask distributed, and shows tasks done / total. The
cluster is a LocalCluster of worker processes, or an existing one (`--scheduler`): only the
Client differs. The work itself is in lake_tasks.py.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import shutil
from contextlib import contextmanager, suppress
from dataclasses import asdict
from datetime import datetime, timezone
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path

import pyarrow.parquet as pq

from . import lake, lake_tasks
from .cli_lake import check_workers
from .errors import CtdaError
from .ingest import IngestResult
from .progress import progress_bar
from .signals import sigint_deferred
from .transaction import Interrupted, is_interruption

_SCHEDULER = re.compile(r"(tcp|tls|inproc|ws|wss)://[^\s/]+")


# ---- the cluster -------------------------------------------------------------------------------

# seconds to reach a scheduler and finish its handshake: once TCP connects, distributed's own
# connect timeout no longer applies, and a port that accepts and stays silent hung forever
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
    terminal's Ctrl-C goes to the whole process group, and workers that took it printed their
    tracebacks; this process alone handles it and closes them."""
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
    # left workers half started, and distributed's exit hook failed on them with a traceback
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


def _stop_on_interruption(client, exc: BaseException) -> None:
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


class _Published:
    """Which ranks' partitions of `tables` a command replaced or added: the lake's files
    before, compared with after."""

    def __init__(self, root: Path, tables: tuple[str, ...], runs: list[str]):
        self.root, self.tables, self.runs = root, tables, runs
        self.before = self._files()

    def _files(self) -> dict[Path, tuple[int, int]]:
        found = {}
        for table in self.tables:
            for run in self.runs:
                for path in (self.root / table / f"run={run}").glob("rank=*/*.parquet"):
                    try:
                        stat = path.stat()
                    except OSError:
                        continue
                    found[path] = (stat.st_ino, stat.st_mtime_ns)
        return found

    def ranks(self) -> dict[str, list[int]]:
        """run name -> the ranks with a new or replaced partition file."""
        changed: dict[str, set[int]] = {}
        for path, identity in self._files().items():
            rank = re.fullmatch(r"rank=(-?\d+)", path.parent.name)  # not an orphan like rank=abc
            if rank and self.before.get(path) != identity:
                run = path.parent.parent.name.removeprefix("run=")
                changed.setdefault(run, set()).add(int(rank.group(1)))
        return {run: sorted(ranks) for run, ranks in sorted(changed.items())}


def _ranks_text(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _still_running(client) -> str:
    if getattr(client, "cluster", None) is not None:
        return ""
    return "; tasks that were running on the cluster may still publish theirs"


def _threads_per_task(client, tasks: int | None = None) -> int:
    """DuckDB threads for each of `tasks` tasks (default: as many as there are workers) that
    run at once: the cores shared by the tasks that can run side by side. A run's lone
    cross-rank task gets every core rather than one while the other workers idle."""
    workers = len(client.scheduler_info().get("workers", {})) or 1
    side_by_side = max(1, min(workers, tasks if tasks is not None else workers))
    return max(1, (os.cpu_count() or 1) // side_by_side)


def _gather(futures, label: str, visible: bool) -> list:
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
def _file_errors(root: Path):
    """A lake the process cannot write or read (read-only, a file where a folder should be) as
    one line naming the path."""
    try:
        yield
    except (ConnectionError, TimeoutError):
        raise  # the cluster's, not the lake's
    except OSError as exc:
        where = exc.filename or root
        raise CtdaError(f"lake {root}: {exc.strerror or exc}: {where}") from None


# ---- ingest ------------------------------------------------------------------------------------

def existing_traces(root: Path) -> list[dict]:
    """run, rank, file_sha256 and source_path of every ingested rank of the lake."""
    found = []
    for folder in sorted((root / "traces").glob("run=*/rank=*")):
        files = sorted(folder.glob("*.parquet"))
        if not files:
            continue
        row = pq.read_table(files[0], columns=["file_sha256", "source_path"]).to_pylist()[0]
        found.append({"run": folder.parent.name.removeprefix("run="),
                      "rank": int(folder.name.removeprefix("rank=")), **row})
    return found


def ingest_lake(client, lake_dir: str | Path, paths: list[str | Path], run: str | None = None,
                meta: dict | None = None, replace: bool = False, show_progress: bool = True) -> IngestResult:
    from .ingest import collect_files, default_run_name

    root = lake.lake_path(lake_dir)
    files = collect_files(paths)
    name = lake.check_run_name(run or default_run_name(paths))
    created = not root.exists()
    with _file_errors(root):
        root.mkdir(parents=True, exist_ok=True)
    try:
        with _file_errors(root), lake.sole_writer(root):
            published = _Published(root, ("traces",), [name])  # a rank is in when its traces are
            runs_file = root / lake.RUNS_FILE
            runs_before = runs_file.read_bytes() if runs_file.is_file() else None
            pending_before = name in lake.pending_ingests(root)
            try:
                return _ingest_locked(client, root, files, name, meta, replace, show_progress)
            except BaseException as exc:
                interrupted = is_interruption(exc)
                _stop_on_interruption(client, exc)  # also where the Ctrl-C came before the tasks
                with sigint_deferred(raise_at_end=False):  # a second Ctrl-C waits for this
                    loaded = published.ranks().get(name, [])
                    if not loaded:  # nothing published: the run's row and mark as they were
                        _restore_runs(root, runs_before, name, pending_before)
                if not interrupted:
                    raise
                if not loaded:
                    raise LakeInterrupted(UNCHANGED) from None
                were = "were loaded and are" if len(loaded) > 1 else "was loaded and is"
                raise LakeInterrupted(
                    f"interrupted; {_ranks_text(loaded)} of run {name!r} {were} kept; run the same command "
                    f"again to finish (it skips what is loaded){_still_running(client)}") from None
    except BaseException:
        # a first ingest that loaded no rank leaves no lake folder behind (as a database file
        # is removed); one that published ranks keeps them, so re-running resumes
        if created and not existing_traces(root):
            shutil.rmtree(root, ignore_errors=True)
        raise


def _ingest_locked(client, root: Path, files: list[Path], name: str, meta: dict | None, replace: bool,
                   show_progress: bool) -> IngestResult:
    lake.remove_stale_staging(root)  # safe: no other writer holds the lake
    runs = lake.read_runs(root)
    by_sha = {t["file_sha256"]: t for t in existing_traces(root)}

    hashes = client.gather(client.map(lake_tasks.file_sha256, [str(f) for f in files], pure=False))
    result = IngestResult(run_name=name, run_id=0)
    to_load, moved = [], []
    for path, sha in zip(files, hashes):
        held = by_sha.get(sha)
        if held and not replace:
            result.skipped.append(f"{path}: already ingested as run {held['run']} rank {held['rank']}; "
                                  "skipped (use --replace to load it again)")
            continue
        if held:
            moved.append(held)
        to_load.append(path)

    threads = _threads_per_task(client, len(to_load))  # a lone file gets every core
    visible = show_progress
    parsed = client.map(lake_tasks.parse_file, [str(f) for f in to_load], threads=threads, lake_dir=str(root),
                        pure=False)
    runs_written = False
    try:
        summaries = _gather(client.map(lake_tasks.trace_summary, parsed, pure=False), "parsing", visible)
        run_row = _run_row(runs, name, meta or {}, summaries)
        _check_ranks(root, run_row, summaries, replace)
        result.run_id = run_row["run_id"]
        runs = [r for r in runs if r["name"] != name] + [run_row]
        # until every rank is written, readers and analyze are told the run may mix ranks of
        # two recordings (a killed `ingest --replace`); re-running the ingest clears it
        lake.mark_ingest_pending(root, name)
        runs_written = True
        lake.write_runs(root, runs)  # the run id is taken before any partition is written
        written = _gather(client.map(lake_tasks.write_ingest, parsed, lake_dir=str(root), run=run_row,
                                     threads=threads, pure=False), "writing", visible)
        for held in moved:
            if (held["run"], held["rank"]) not in {(name, s["rank"]) for s in summaries}:
                lake.drop_partitions(root, lake.PARTITIONED, held["run"], held["rank"])
        lake.clear_ingest_pending(root, name)
    except BaseException as exc:
        _stop_on_interruption(client, exc)  # before the cleanup below
        raise
    finally:
        del parsed
        if runs_written:
            _drop_empty_runs(root)
        # the parsed events spilled under _tmp by tasks that did not write them (a failed batch)
        lake.remove_stale_staging(root)
    for item in written:
        result.loaded.append(item["loaded"])
        result.warnings.extend(item["warnings"])
    return result


def _restore_runs(root: Path, runs_before: bytes | None, name: str, pending_before: bool) -> None:
    """An ingest that published no rank leaves runs.parquet and the run's unfinished-ingest
    mark as they were (its run id and merged --meta were written before the ranks)."""
    runs_file = root / lake.RUNS_FILE
    with suppress(OSError):  # the failure being reported says more than this one would
        if runs_before is None:
            runs_file.unlink(missing_ok=True)
        else:
            staged = root / f".{lake.RUNS_FILE}.restore"
            staged.write_bytes(runs_before)
            os.replace(staged, runs_file)
        if not pending_before:
            lake.clear_ingest_pending(root, name)


def _run_row(runs: list[dict], name: str, meta: dict, summaries: list[dict]) -> dict:
    for row in runs:
        if row["name"] == name:
            merged = {**json.loads(row["meta"]), **meta}
            return {**row, "meta": json.dumps(merged)}
    starts = [s["start"] for s in summaries if s["start"] is not None]
    origin = min(starts).to_integral_value(ROUND_FLOOR) if starts else Decimal(0)
    run_id = max((r["run_id"] for r in runs), default=0) + 1
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    return {"run_id": run_id, "name": name, "ingested_at": now, "meta": json.dumps(meta), "origin_ts": origin}


def _check_ranks(root: Path, run_row: dict, summaries: list[dict], replace: bool) -> None:
    seen: dict[int, str] = {}
    for summary in summaries:
        if summary["rank"] in seen:
            raise CtdaError(f"{seen[summary['rank']]} and {summary['path']} are both rank {summary['rank']}; "
                            "ingest them as separate runs (--run NAME)")
        seen[summary["rank"]] = summary["path"]
    if replace:
        return
    held = set(lake.ranks_of(root, "traces", run_row["name"]))
    for summary in summaries:
        if summary["rank"] in held:
            raise CtdaError(f"{summary['path']}: the run already has rank {summary['rank']}; "
                            "use --replace to overwrite it or --run NAME for a new run")


def _drop_empty_runs(root: Path) -> None:
    runs = lake.read_runs(root)
    kept = [r for r in runs if lake.ranks_of(root, "traces", r["name"])]
    if len(kept) != len(runs):
        lake.write_runs(root, kept)


# ---- analyze -----------------------------------------------------------------------------------

def analyze_lake(client, lake_dir: str | Path, run: str | None = None, method: str = "all",
                 window: str | None = None, settings=None, show_progress: bool = True) -> str:
    from .analyze import resolve_methods
    from .crossrank import METHOD, per_rank_methods

    methods = resolve_methods(method)
    cross = METHOD in methods
    # the per-rank engine (ctda included when cross_rank needs its paths) runs one task per
    # rank; the cross-rank stages then run one task per run over those paths
    per_rank = per_rank_methods(methods)
    root = lake.lake_path(lake_dir, must_exist=True)
    with _file_errors(root), lake.sole_writer(root):
        runs = [r["name"] for r in lake.read_runs(root) if run is None or r["name"] == run]
        published = _Published(root, lake.ANALYSIS_TABLES + lake.CROSS_RANK_TABLES, runs)
        try:
            return _analyze_locked(client, root, run, methods, per_rank, cross, window, settings, show_progress)
        except BaseException as exc:
            if not is_interruption(exc):
                raise
            _stop_on_interruption(client, exc)
            with sigint_deferred(raise_at_end=False):  # a second Ctrl-C waits for this
                analysed = published.ranks()
            if not analysed:
                raise LakeInterrupted(UNCHANGED) from None
            kept = "; ".join(f"run {name!r} {_ranks_text(ranks)}" for name, ranks in analysed.items())
            others = any(set(lake.ranks_of(root, "traces", name)) - set(analysed.get(name, [])) for name in runs)
            raise LakeInterrupted(
                f"interrupted; the lake keeps the new results of {kept}"
                f"{'; the other ranks keep what they had' if others else ''}; run the same command again to "
                f"finish{_still_running(client)}") from None


def _analyze_locked(client, root: Path, run: str | None, methods: list[str], per_rank: list[str], cross: bool,
                    window: str | None, settings, show_progress: bool) -> str:
    from .analyze import NO_WINDOWS, AnalysisSettings, added_counts, summary_text

    lake.remove_stale_staging(root)  # safe: no other writer holds the lake
    runs = lake.read_runs(root)
    chosen = [r for r in runs if run is None or r["name"] == run]
    if run is not None and not chosen:
        names = ", ".join(sorted(r["name"] for r in runs)) or "none (ingest first)"
        raise CtdaError(f"no run named {run!r}; runs: {names}")
    damaged, _ = lake.lake_problems(root, [r["name"] for r in chosen])
    for name, problems in sorted(damaged.items()):  # its paths would be built on part of its events
        raise CtdaError(lake.damage_message(root, name, problems))
    work = [(r, rank) for r in chosen for rank in lake.ranks_of(root, "traces", r["name"])]
    if not work:
        raise CtdaError(NO_WINDOWS)
    settings_dict = asdict(settings or AnalysisSettings())
    threads = _threads_per_task(client, len(work))  # a lone rank gets every core
    notes, futures, rank_counts = [], [], []
    if per_rank:  # with cross_rank, each task also hands its run's task the events it reads
        futures = [client.submit(lake_tasks.analyze_rank, str(root), r, rank, per_rank, window, settings_dict,
                                 threads, cross, pure=False) for r, rank in work]
        # the client fetches only each rank's summary figures; the events stay on the workers
        try:
            rank_counts = _gather([client.submit(lake_tasks.summary_counts, f, pure=False) for f in futures],
                                  "analyzing ranks", show_progress)
        except CtdaError:  # cancelling the figures' tasks leaves the rank tasks they wait on
            client.cancel(futures)
            raise
        except BaseException as exc:
            _stop_on_interruption(client, exc)  # before the futures are released
            raise
    if cross:  # after the per-rank tasks, which write the same partitions
        ranks = {r["name"]: [rank for r2, rank in work if r2["name"] == r["name"]] for r in chosen}
        rank_futures = {r["name"]: [f for (r2, _), f in zip(work, futures) if r2["name"] == r["name"]]
                        for r in chosen}
        runs_with_ranks = [r for r in chosen if ranks[r["name"]]]
        run_threads = _threads_per_task(client, len(runs_with_ranks))
        run_futures = [client.submit(lake_tasks.cross_rank_run, str(root), r, ranks[r["name"]], run_threads,
                                     rank_futures[r["name"]], pure=False)
                       for r in runs_with_ranks]
        for done in _gather(run_futures, "analyzing runs", show_progress):
            notes += [f"  {line}" for line in done["lines"]]
    # the summary the database's analyze prints, from the figures of the rank tasks
    return "\n".join([summary_text(added_counts(rank_counts))] + notes)
