"""Ingest into and analyze a lake on a Dask cluster: the client side.

The client assigns run ids and the run's time origin, submits one task per trace file
(ingest) or per (run, rank) (analyze) to Dask distributed, and shows tasks done / total. The
cluster is a LocalCluster of worker processes, or an existing one (`--scheduler`): only the
Client differs (warehouse/lake/cluster.py). The work itself is in warehouse/lake/tasks.py.
"""

from __future__ import annotations

import json
import shutil
from contextlib import suppress
from dataclasses import asdict
from datetime import datetime, timezone
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ctda_sql.core.errors import CtdaError
from ctda_sql.core.signals import sigint_deferred
from ctda_sql.core.transaction import is_interruption
from ctda_sql.ingest.load import IngestResult
from ctda_sql.lake import integrity
from ctda_sql.lake import store as lake
from ctda_sql.lake import tasks as lake_tasks
from ctda_sql.lake.cluster import (
    UNCHANGED,
    LakeInterrupted,
    Published,
    file_errors,
    gather_results,
    ranks_text,
    still_running,
    stop_on_interruption,
    threads_per_task,
)

# ---- ingest ------------------------------------------------------------------------------------

def existing_traces(root: Path) -> list[dict]:
    """run, rank, file_sha256 and source_path of every ingested rank of the lake (a traces
    file that cannot be read is left out: its rank is loaded again with --replace)."""
    found = []
    for folder in sorted((root / "traces").glob("run=*/rank=*")):
        part = folder / lake.PART_FILE
        if not part.is_file():
            continue
        try:
            row = pq.read_table(part, columns=["file_sha256", "source_path"]).to_pylist()[0]
        except (OSError, pa.ArrowException, IndexError):
            continue
        found.append({"run": folder.parent.name.removeprefix("run="),
                      "rank": int(folder.name.removeprefix("rank=")), **row})
    return found


def ingest_lake(client, lake_dir: str | Path, paths: list[str | Path], run: str | None = None,
                meta: dict | None = None, replace: bool = False, show_progress: bool = True) -> IngestResult:
    from ctda_sql.ingest.load import collect_files, default_run_name

    root = lake.lake_path(lake_dir)
    files = collect_files(paths)
    name = lake.check_run_name(run or default_run_name(paths))
    created = not root.exists()
    with file_errors(root):
        root.mkdir(parents=True, exist_ok=True)
    try:
        with file_errors(root), lake.sole_writer(root):
            published = Published(root, ("traces",), [name])  # a rank is in when its traces are
            runs_file = root / lake.RUNS_FILE
            runs_before = runs_file.read_bytes() if runs_file.is_file() else None
            pending_before = name in lake.pending_ingests(root)
            try:
                return _ingest_locked(client, root, files, name, meta, replace, show_progress)
            except BaseException as exc:
                interrupted = is_interruption(exc)
                stop_on_interruption(client, exc)  # also where the Ctrl-C came before the tasks
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
                    f"interrupted; {ranks_text(loaded)} of run {name!r} {were} kept; run the same command "
                    f"again to finish (it skips what is loaded){still_running(client)}") from None
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

    threads = threads_per_task(client, len(to_load))  # a lone file gets every core
    visible = show_progress
    parsed = client.map(lake_tasks.parse_file, [str(f) for f in to_load], threads=threads, lake_dir=str(root),
                        pure=False)
    runs_written = False
    try:
        summaries = gather_results(client.map(lake_tasks.trace_summary, parsed, pure=False), "parsing", visible)
        run_row = _run_row(runs, name, meta or {}, summaries)
        _check_ranks(root, run_row, summaries, replace)
        result.run_id = run_row["run_id"]
        runs = [r for r in runs if r["name"] != name] + [run_row]
        # until every rank is written, readers and analyze are told the run may mix ranks of
        # two recordings (a killed `ingest --replace`); re-running the ingest clears it
        lake.mark_ingest_pending(root, name)
        runs_written = True
        lake.write_runs(root, runs)  # the run id is taken before any partition is written
        written = gather_results(client.map(lake_tasks.write_ingest, parsed, lake_dir=str(root), run=run_row,
                                     threads=threads, pure=False), "writing", visible)
        for held in moved:
            if (held["run"], held["rank"]) not in {(name, s["rank"]) for s in summaries}:
                lake.drop_partitions(root, lake.PARTITIONED, held["run"], held["rank"])
        lake.clear_ingest_pending(root, name)
    except BaseException as exc:
        stop_on_interruption(client, exc)  # before the cleanup below
        raise
    finally:
        del parsed
        if runs_written:  # this run if no rank of it is in, and runs whose ranks it took over
            _drop_empty_runs(root, {name} | {held["run"] for held in moved})
        # the parsed events spilled under _tmp by tasks that did not write them (a failed batch)
        lake.remove_stale_staging(root)
    for item in written:
        result.loaded.append(item["loaded"])
        result.warnings.extend(item["warnings"])
    return result


def _restore_runs(root: Path, runs_before: bytes | None, name: str, pending_before: bool) -> None:
    """An ingest that published no rank leaves runs.parquet and the run's unfinished-ingest
    mark as they were (its run id and merged --meta were written before the ranks)."""
    if not pending_before:  # first: the run may never have been published at all
        with suppress(OSError):
            lake.clear_ingest_pending(root, name)
    with suppress(OSError):  # the failure being reported says more than this one would
        if runs_before is None:
            (root / lake.RUNS_FILE).unlink(missing_ok=True)
        else:
            lake.restore_runs_file(root, runs_before)


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
    held = set(lake.ingested_ranks(root, run_row["name"]))
    for summary in summaries:
        if summary["rank"] in held:
            raise CtdaError(f"{summary['path']}: the run already has rank {summary['rank']}; "
                            "use --replace to overwrite it or --run NAME for a new run")


def _drop_empty_runs(root: Path, names: set[str]) -> None:
    """Remove the runs of `names` that have no rank in the lake from runs.parquet. Only those:
    another run without ranks lost its traces partitions, which the integrity check reports
    (an ingest of another run dropped it from runs.parquet without a word)."""
    runs = lake.read_runs(root)
    kept = [r for r in runs if r["name"] not in names or lake.ingested_ranks(root, r["name"])]
    if len(kept) != len(runs):
        lake.write_runs(root, kept)


# ---- analyze -----------------------------------------------------------------------------------

def analyze_lake(client, lake_dir: str | Path, run: str | None = None, method: str = "all",
                 window: str | None = None, settings=None, show_progress: bool = True) -> str:
    from ctda_sql.engine.analyze import resolve_methods
    from ctda_sql.engine.crossrank import METHOD, per_rank_methods

    methods = resolve_methods(method)
    cross = METHOD in methods
    # the per-rank engine (ctda included when cross_rank needs its paths) runs one task per
    # rank; the cross-rank stages then run one task per run over those paths
    per_rank = per_rank_methods(methods)
    root = lake.lake_path(lake_dir, must_exist=True)
    with file_errors(root), lake.sole_writer(root):
        runs = [r["name"] for r in lake.read_runs(root) if run is None or r["name"] == run]
        published = Published(root, lake.ANALYSIS_TABLES + lake.CROSS_RANK_TABLES, runs)
        try:
            return _analyze_locked(client, root, run, methods, per_rank, cross, window, settings, show_progress)
        except BaseException as exc:
            if not is_interruption(exc):
                raise
            stop_on_interruption(client, exc)
            with sigint_deferred(raise_at_end=False):  # a second Ctrl-C waits for this
                analysed = published.ranks()
            if not analysed:
                raise LakeInterrupted(UNCHANGED) from None
            kept = "; ".join(f"run {name!r} {ranks_text(ranks)}" for name, ranks in analysed.items())
            others = any(set(lake.ingested_ranks(root, name)) - set(analysed.get(name, [])) for name in runs)
            raise LakeInterrupted(
                f"interrupted; the lake keeps the new results of {kept}"
                f"{'; the other ranks keep what they had' if others else ''}; run the same command again to "
                f"finish{still_running(client)}") from None


def _analyze_locked(client, root: Path, run: str | None, methods: list[str], per_rank: list[str], cross: bool,
                    window: str | None, settings, show_progress: bool) -> str:
    from ctda_sql.engine.analyze import NO_WINDOWS, AnalysisSettings, added_counts, summary_text

    lake.remove_stale_staging(root)  # safe: no other writer holds the lake
    runs = lake.read_runs(root)
    chosen = [r for r in runs if run is None or r["name"] == run]
    if run is not None and not chosen:
        names = ", ".join(sorted(r["name"] for r in runs)) or "none (ingest first)"
        raise CtdaError(f"no run named {run!r}; runs: {names}")
    damaged, _ = integrity.lake_problems(root, [r["name"] for r in chosen])
    for name, problems in sorted(damaged.items()):  # its paths would be built on part of its events
        raise CtdaError(integrity.damage_message(root, name, problems))
    work = [(r, rank) for r in chosen for rank in lake.ingested_ranks(root, r["name"])]
    if not work:
        raise CtdaError(NO_WINDOWS)
    settings_dict = asdict(settings or AnalysisSettings())
    threads = threads_per_task(client, len(work))  # a lone rank gets every core
    notes, futures, rank_counts = [], [], []
    if per_rank:  # with cross_rank, each task also hands its run's task the events it reads
        futures = [client.submit(lake_tasks.analyze_rank, str(root), r, rank, per_rank, window, settings_dict,
                                 threads, cross, pure=False) for r, rank in work]
        # the client fetches only each rank's summary figures; the events stay on the workers
        try:
            rank_counts = gather_results([client.submit(lake_tasks.summary_counts, f, pure=False) for f in futures],
                                  "analyzing ranks", show_progress)
        except CtdaError:  # cancelling the figures' tasks leaves the rank tasks they wait on
            client.cancel(futures)
            raise
        except BaseException as exc:
            stop_on_interruption(client, exc)  # before the futures are released
            raise
    if cross:  # after the per-rank tasks, which write the same partitions
        ranks = {r["name"]: [rank for r2, rank in work if r2["name"] == r["name"]] for r in chosen}
        rank_futures = {r["name"]: [f for (r2, _), f in zip(work, futures) if r2["name"] == r["name"]]
                        for r in chosen}
        runs_with_ranks = [r for r in chosen if ranks[r["name"]]]
        run_threads = threads_per_task(client, len(runs_with_ranks))
        run_futures = [client.submit(lake_tasks.cross_rank_run, str(root), r, ranks[r["name"]], run_threads,
                                     rank_futures[r["name"]], pure=False)
                       for r in runs_with_ranks]
        for done in gather_results(run_futures, "analyzing runs", show_progress):
            notes += [f"  {line}" for line in done["lines"]]
    # the summary the database's analyze prints, from the figures of the rank tasks
    return "\n".join([summary_text(added_counts(rank_counts))] + notes)
