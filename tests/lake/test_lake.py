"""The Parquet lake (`--lake DIR`): built and analysed on Dask, queried with DuckDB.

One LocalCluster of 2 worker processes serves the module (the CLI reaches it with
--scheduler, the same code path as a real cluster); one test starts `dask scheduler` and
`dask worker` subprocesses instead.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import pickle
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctda_sql.lake import store as lakemod
from ctda_sql.lake.views import open_lake

from helpers.traces import training_trace

distributed = pytest.importorskip("distributed")

REPORTS = ("hotspots", "cpcr", "runs", "kernel_breakdown", "idle_time", "percentiles",
           "cross_rank_hotspots", "collective_skew", "clock_offsets")
QUERIES = (
    "SELECT * EXCLUDE (run_id) FROM critical_path ORDER BY ALL",
    "SELECT rank, count(*), sum(dur_us), min(ts_us), max(end_us), count(DISTINCT args) FROM events GROUP BY rank ORDER BY ALL",
    # every stored column of every event, the lossless ones (ts_raw, args, extra) included
    "SELECT rank, count(*), bit_xor(hash(event_id, name, cat, ph, ts_us, dur_us, pid, tid, stream, correlation, "
    "external_id, ts_raw, args, extra)) FROM events GROUP BY rank ORDER BY ALL",
    "SELECT * EXCLUDE (run_id) FROM steps ORDER BY ALL",
    "SELECT * EXCLUDE (run_id, ingested_at, source_path) FROM traces ORDER BY ALL",
    "SELECT * EXCLUDE (run_id) FROM collective_instances ORDER BY ALL",
    "SELECT * EXCLUDE (run_id) FROM cross_rank_segments ORDER BY ALL",
)


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as c:
        yield c.scheduler_address


@pytest.fixture
def lake_cli(run_cli, cluster):
    """`ctda-sql` with --scheduler of the module's cluster added to ingest and analyze."""

    def run(*args: str, db: Path | None = None):
        if args[0] in ("ingest", "analyze") and "--lake" in args and "--workers" not in args:
            args = (*args, "--scheduler", cluster)
        return run_cli(*args, db=db)

    return run


def _csv(text: str, drop: tuple[str, ...] = ("ingested_at",)) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return rows
    keep = [i for i, name in enumerate(rows[0]) if name not in drop]
    return [[_cell(row[i]) for i in keep] for row in rows]


def _cell(text: str) -> str:
    """Numbers to 12 significant digits: a sum over rows read in another order may differ in
    its last bit (the DuckDB file and the lake store the same values)."""
    try:
        return f"{float(text):.12g}"
    except ValueError:
        return text


def _build_both(lake_cli, db: Path, lake: Path, paths: list[str], *ingest_args: str) -> None:
    on_db = lake_cli("ingest", "-q", *paths, *ingest_args, db=db)
    on_lake = lake_cli("ingest", "-q", *paths, *ingest_args, "--lake", str(lake))
    assert on_db.code == 0 and on_lake.code == 0, on_db.err + on_lake.err
    # every method: per_thread a task per rank, ctda and cross_rank a task per run
    on_db = lake_cli("analyze", "-q", db=db)
    assert on_db.code == 0, on_db.err
    result = lake_cli("analyze", "-q", "--lake", str(lake))
    assert result.code == 0, result.err
    # the summary the lake's tasks report: the database's windows, ranks, nodes and CPCRs; the
    # lake's cross-rank task prints a line per run, which names it
    assert "cross_rank: run '" in result.out
    assert re.sub(r"cross_rank: run '[^']*': ", "cross_rank: ", result.out) == on_db.out


def _cells(text: str) -> list[list[str]]:
    """Every CSV line's cells (numbers as _cell writes them), tables of any width one after another."""
    return [[_cell(cell) for cell in row] for row in csv.reader(io.StringIO(text))]


def _assert_same(lake_cli, db: Path, lake: Path) -> None:
    for report in REPORTS:
        on_db = lake_cli("report", report, "-f", "csv", db=db)
        on_lake = lake_cli("report", report, "-f", "csv", "--lake", str(lake))
        assert on_db.code == 0 and on_lake.code == 0, on_lake.err
        # the same rows; rows tied on a report's ORDER BY may come in either order
        lake_rows, db_rows = _csv(on_lake.out), _csv(on_db.out)
        assert lake_rows[:1] == db_rows[:1] and sorted(lake_rows[1:]) == sorted(db_rows[1:]), report
    for sql in QUERIES:
        on_db = lake_cli("query", sql, "-f", "csv", db=db)
        on_lake = lake_cli("query", sql, "-f", "csv", "--lake", str(lake))
        assert on_db.code == 0 and on_lake.code == 0, on_lake.err
        assert _csv(on_lake.out) == _csv(on_db.out), sql


def _two_rank_folder(folder: Path) -> Path:
    """Two ranks of test_sql_files' job, rank 1 slower and its steps 7 us later: ranks whose
    steps end at the same time tie for "the rank that finished last", which the cross-rank
    engine breaks arbitrarily (in a database too)."""
    folder.mkdir()
    for trace in (training_trace(0, 2), training_trace(1, 2, slow=50, shift=7)):
        trace.write(folder / f"rank{trace.rank}.json")
    return folder


# ---- always: a small synthetic job -------------------------------------------------------------

def test_synthetic_lake_and_database_give_identical_results(lake_cli, tmp_path):
    folder = _two_rank_folder(tmp_path / "small")
    db, lake = tmp_path / "w.duckdb", tmp_path / "lake"
    _build_both(lake_cli, db, lake, [str(folder)])
    _assert_same(lake_cli, db, lake)
    # Hive layout, one partition per (table, run, rank)
    for table in lakemod.PARTITIONED:
        assert sorted(p.name for p in (lake / table / "run=small").iterdir()) == ["rank=0", "rank=1"], table
    assert (lake / "runs.parquet").is_file() and not any((lake / "_tmp").glob("*"))


def test_analyzing_one_method_again_keeps_the_cross_rank_path_once(lake_cli, tmp_path):
    """The run's cross-rank task writes its path into files of its own beside each rank's
    per-rank paths; a later `analyze --method ctda` replaces the per-rank files and keeps the
    cross-rank path, once, as the database keeps the rows of methods it does not analyze."""
    folder = _two_rank_folder(tmp_path / "small")
    db, lake = tmp_path / "w.duckdb", tmp_path / "lake"
    _build_both(lake_cli, db, lake, [str(folder)])
    for table in lakemod.CROSS_RANK_PATH_TABLES:
        for rank_folder in (lake / table / "run=small").iterdir():
            assert sorted(p.name for p in rank_folder.iterdir()) == [lakemod.CROSS_RANK_FILE, lakemod.PART_FILE]
    count = "SELECT method, count(*) FROM critical_path GROUP BY method ORDER BY method"
    before = lake_cli("query", count, "-f", "csv", "--lake", str(lake)).out
    assert "cross_rank" in before
    assert lake_cli("analyze", "-q", "--method", "ctda", db=db).code == 0
    again = lake_cli("analyze", "-q", "--method", "ctda", "--lake", str(lake))
    assert again.code == 0, again.err
    assert lake_cli("query", count, "-f", "csv", "--lake", str(lake)).out == before
    _assert_same(lake_cli, db, lake)


def test_a_lake_with_the_cross_rank_path_in_its_per_rank_files_is_analyzed_without_duplicates(lake_cli, tmp_path):
    """Lakes written before the cross-rank path had files of its own hold its rows in each
    rank's part-0.parquet; analysing such a lake again gives the database's results, each
    cross-rank row once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = _two_rank_folder(tmp_path / "small")
    db, lake = tmp_path / "w.duckdb", tmp_path / "lake"
    _build_both(lake_cli, db, lake, [str(folder)])
    for table in lakemod.CROSS_RANK_PATH_TABLES:  # back to the older layout
        for rank_folder in (lake / table / "run=small").iterdir():
            part, cross = rank_folder / lakemod.PART_FILE, rank_folder / lakemod.CROSS_RANK_FILE
            pq.write_table(pa.concat_tables([pq.read_table(part), pq.read_table(cross)]), part)
            cross.unlink()
    again = lake_cli("analyze", "-q", "--lake", str(lake))
    assert again.code == 0, again.err
    _assert_same(lake_cli, db, lake)


def test_the_cross_rank_files_are_carried_over_on_a_file_system_without_hard_links(tmp_path, monkeypatch):
    """A rank's analyze task links the cross-rank path's files into the partition it
    publishes; where the lake's file system has no hard links it copies them."""
    lake, staging = tmp_path / "lake", tmp_path / "staging"
    for table in lakemod.CROSS_RANK_PATH_TABLES:
        held = lakemod.partition_dir(lake, table, "r", 3)
        held.mkdir(parents=True)
        (held / lakemod.CROSS_RANK_FILE).write_bytes(f"{table} rows".encode())
        (staging / table).mkdir(parents=True)

    def no_links(*_):
        raise OSError("Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    lakemod.carry_cross_rank_files(staging, lake, "r", 3)
    for table in lakemod.CROSS_RANK_PATH_TABLES:
        assert (staging / table / lakemod.CROSS_RANK_FILE).read_bytes() == f"{table} rows".encode()


@pytest.mark.parametrize("above", ["job=1", "exp[1]*?"])
def test_a_lake_under_an_odd_folder_name_gives_the_same_results(lake_cli, tmp_path, above):
    """Views and the cross-rank task read run and rank from the partition folders (a folder
    named key=value above the lake changes nothing), and DuckDB reads the lake's paths
    literally (it expands * ? [ ] in any path it is given)."""
    folder = _two_rank_folder(tmp_path / "small")
    db, lake = tmp_path / "w.duckdb", tmp_path / above / "lake"
    _build_both(lake_cli, db, lake, [str(folder)])
    _assert_same(lake_cli, db, lake)


@pytest.mark.parametrize("above", ["rank=9", "run=old"])
def test_a_lake_under_a_folder_named_like_its_partitions_is_refused(lake_cli, tmp_path, above):
    """DuckDB reads key=value from every folder of a path and keeps the first: under rank=9
    every file would read as rank 9. One clear line instead, and nothing written."""
    lake = tmp_path / above / "lake"
    result = lake_cli("ingest", "-q", str(_two_rank_folder(tmp_path / "small")), "--lake", str(lake))
    assert result.code != 0 and len(result.err.strip().splitlines()) == 1
    assert f"the folder '{above}' in its path would be read as the lake's own run or rank" in result.err
    assert not lake.exists()


def test_rank_filter_prunes_partitions(lake_cli, tmp_path):
    lake = tmp_path / "lake"
    assert lake_cli("ingest", "-q", str(_two_rank_folder(tmp_path / "small")), "--lake", str(lake)).code == 0
    con = open_lake(lake)
    try:
        plan = "\n".join(row[1] for row in con.execute(
            "EXPLAIN ANALYZE SELECT count(*) FROM events WHERE rank = 1").fetchall())
        counts = con.execute("SELECT rank, count(*) FROM events GROUP BY rank ORDER BY rank").fetchall()
    finally:
        con.close()
    assert len(counts) == 2
    assert "1/2" in plan.replace(" ", ""), plan  # files scanned / files in the glob


@pytest.mark.parametrize("above", ["plain", "exp[1]"])
def test_safe_reads_the_lake_and_nothing_else(lake_cli, tmp_path, above):
    """--safe lets SQL read the lake's files only, wherever the lake is (a folder name with
    [ ] included: the views hand DuckDB that path escaped)."""
    lake = tmp_path / above / "lake"
    assert lake_cli("ingest", "-q", str(_two_rank_folder(tmp_path / "small")), "--lake", str(lake)).code == 0
    (tmp_path / "other.csv").write_text("a\n1\n")
    ok = lake_cli("query", "SELECT count(*) FROM events", "-f", "csv", "--lake", str(lake), "--safe")
    assert ok.code == 0 and int(ok.out.splitlines()[1]) > 0
    refused = lake_cli("query", f"SELECT * FROM read_csv('{tmp_path / 'other.csv'}')", "--lake", str(lake), "--safe")
    assert refused.code == 1 and refused.err.startswith("error: ")


def test_local_cluster_of_workers(run_cli, tmp_path):
    """--workers N starts its own LocalCluster (no --scheduler)."""
    lake = tmp_path / "lake"
    result = run_cli("ingest", "-q", str(_two_rank_folder(tmp_path / "small")), "--lake", str(lake), "--workers", "1")
    assert result.code == 0, result.err
    assert "2 loaded" in result.out


def test_reingest_skips_and_replace_reloads(lake_cli, tmp_path):
    folder, lake = _two_rank_folder(tmp_path / "small"), tmp_path / "lake"
    assert lake_cli("ingest", "-q", str(folder), "--lake", str(lake)).code == 0
    again = lake_cli("ingest", "-q", str(folder), "--lake", str(lake))
    assert again.code == 0 and "0 loaded, 2 skipped" in again.out
    replaced = lake_cli("ingest", "-q", str(folder), "--lake", str(lake), "--replace")
    assert replaced.code == 0 and "2 loaded" in replaced.out
    runs = lake_cli("query", "SELECT run_id, name FROM runs", "-f", "csv", "--lake", str(lake))
    assert runs.out.splitlines()[1:] == ["1,small"]


# ---- atomic partitions, resume -----------------------------------------------------------------

def test_failed_task_leaves_no_partial_partition_and_rerun_resumes(lake_cli, tmp_path, monkeypatch):
    """A task that dies while publishing (after events, before traces) leaves whole partitions
    only, and that rank counts as not ingested: re-running loads it and nothing else."""
    from ctda_sql.lake import run as lake_run
    from ctda_sql.lake import tasks as lake_tasks

    folder, lake = _two_rank_folder(tmp_path / "small"), tmp_path / "lake"
    reference = tmp_path / "reference"
    assert lake_cli("ingest", "-q", str(folder), "--lake", str(reference)).code == 0
    assert lake_cli("ingest", "-q", str(folder / "rank0.json"), "--lake", str(lake), "--run", "small").code == 0

    # rank 1, in this process, dying after its events partition was renamed into place
    real_publish = lakemod.publish

    def dying_publish(staged: Path, target: Path) -> None:
        if target.parent.parent.name == "traces":
            raise KeyboardInterrupt
        real_publish(staged, target)

    monkeypatch.setattr(lakemod, "publish", dying_publish)
    run = [r for r in lakemod.read_runs(lake) if r["name"] == "small"][0]
    parsed = lake_tasks.parse_file(str(folder / "rank1.json"), 1, str(lake))
    with pytest.raises(KeyboardInterrupt):
        lake_tasks.write_ingest(parsed, str(lake), run, 1)
    monkeypatch.setattr(lakemod, "publish", real_publish)
    assert [e["rank"] for e in lake_run.existing_traces(lake)] == [0]  # rank 1 is not in
    for folder_ in (lake / "events" / "run=small").iterdir():  # whatever is there is whole
        assert [p.name for p in folder_.iterdir()] == ["part-0.parquet"]
    assert any((lake / "_tmp").iterdir())  # the dead task's staging folder

    resumed = lake_cli("ingest", "-q", str(folder), "--lake", str(lake))
    assert resumed.code == 0, resumed.err
    assert "1 loaded, 1 skipped" in resumed.out
    assert not (lake / "_tmp").exists() or not any((lake / "_tmp").iterdir())
    sql = "SELECT * EXCLUDE (ingested_at, source_path) FROM traces ORDER BY ALL"
    for q in (sql, QUERIES[1], QUERIES[2]):
        got = lake_cli("query", q, "-f", "csv", "--lake", str(lake)).out
        assert got == lake_cli("query", q, "-f", "csv", "--lake", str(reference)).out


def test_bad_file_in_batch_writes_nothing(lake_cli, tmp_path):
    folder, lake = _two_rank_folder(tmp_path / "small"), tmp_path / "lake"
    (folder / "rank2.json").write_text('{"traceEvents": [')
    result = lake_cli("ingest", "-q", str(folder), "--lake", str(lake))
    assert result.code == 1
    assert result.err.startswith("error: ") and len(result.err.strip().splitlines()) == 1
    assert not (lake / "events").exists() and lakemod.read_runs(lake) == []
    # the good files' parsed events, spilled for the write phase, are gone too
    assert not (lake / "_tmp").exists() or not any((lake / "_tmp").iterdir())


def test_parsed_events_wait_on_disk_and_are_gone_after_the_write(lake_cli, tmp_path):
    """A parse task leaves its events in LAKE/_tmp and returns only their path (the batch's
    parsed tables no longer have to fit in worker memory, nor travel between workers); the
    write task maps them for its insert and removes them."""
    from ctda_sql.lake import tasks as lake_tasks

    folder, lake = _two_rank_folder(tmp_path / "small"), tmp_path / "lake"
    lake.mkdir()
    spilled = lake_tasks.parse_file(str(folder / "rank0.json"), 1, str(lake))
    assert (spilled.folder / "events.arrow").is_file() and spilled.folder.parent == lake / "_tmp"
    assert spilled.parsed.events is None and len(pickle.dumps(spilled)) < 20_000
    assert spilled.parsed.map_events().num_rows == spilled.parsed.event_count > 0
    assert lake_cli("ingest", "-q", str(folder), "--lake", str(lake)).code == 0
    assert not (lake / "_tmp").exists() or not any((lake / "_tmp").iterdir())


def test_a_failed_first_ingest_leaves_no_lake_folder(lake_cli, tmp_path):
    (tmp_path / "bad.json").write_text('{"traceEvents": [')
    result = lake_cli("ingest", "-q", str(tmp_path / "bad.json"), "--lake", str(tmp_path / "lake"))
    assert result.code == 1 and result.err.startswith("error: ")
    assert not (tmp_path / "lake").exists()


def test_an_unreadable_partition_fails_analyze_with_one_line_naming_its_rank(lake_cli, tmp_path):
    lake = tmp_path / "lake"
    assert lake_cli("ingest", "-q", str(_two_rank_folder(tmp_path / "small")), "--lake", str(lake)).code == 0
    [part] = (lake / "events" / "run=small" / "rank=1").glob("*.parquet")
    part.write_bytes(b"not parquet")
    result = lake_cli("analyze", "-q", "--lake", str(lake))
    assert result.code == 1 and len(result.err.strip().splitlines()) == 1, result.err
    # the integrity check names the file before a task fails on it
    assert result.err.startswith(f"error: lake {lake}: run small: events/run=small/rank=1/part-0.parquet "
                                 "cannot be read (not a Parquet file)"), result.err


@pytest.mark.parametrize("args, message", [
    (("ingest", "x.json", "--workers", "2"), "--workers and --scheduler need --lake"),
    (("ingest", "PATH", "--lake", "LAKE", "--run", "a/b"), "cannot name a lake partition"),
    (("query", "SELECT 1", "--lake", "NOLAKE"), "no lake at"),
    (("analyze", "--lake", "NOLAKE"), "no lake at"),
    (("analyze", "--lake", "LAKE", "--run", "nope"), "no run named 'nope'"),
    (("ingest", "PATH", "--lake", "LAKE", "--scheduler", "nonsense"), "must look like tcp://HOST:PORT"),
])
def test_bad_input_is_one_error_line(run_cli, tmp_path, args, message):
    folder = _two_rank_folder(tmp_path / "small")
    (tmp_path / "lake").mkdir()
    lakemod.write_runs(tmp_path / "lake", [])
    subst = {"PATH": str(folder), "LAKE": str(tmp_path / "lake"), "NOLAKE": str(tmp_path / "none")}
    result = run_cli(*[subst.get(a, a) for a in args])
    assert result.code != 0
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.err


# ---- an existing cluster: dask scheduler + dask worker on 127.0.0.1 ----------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ingest_through_an_external_scheduler(run_cli, tmp_path):
    dask = str(Path(sys.executable).parent / "dask")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = open(tmp_path / "dask.log", "w")
    scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                  "--no-dashboard"], stdout=logs, stderr=logs)
    worker = None
    try:
        worker = subprocess.Popen([dask, "worker", address, "--nworkers", "2", "--nthreads", "1",
                                   "--no-dashboard", "--host", "127.0.0.1"], stdout=logs, stderr=logs)
        _wait_for_workers(address, 2)
        folder, lake = _two_rank_folder(tmp_path / "small"), tmp_path / "lake"
        result = run_cli("ingest", "-q", str(folder), "--lake", str(lake), "--scheduler", address)
        assert result.code == 0, result.err
        assert "2 loaded" in result.out
        assert run_cli("analyze", "-q", "--lake", str(lake), "--scheduler", address).code == 0
        cp = run_cli("query", "SELECT count(DISTINCT rank) FROM critical_path", "-f", "csv", "--lake", str(lake))
        assert cp.out.splitlines()[1] == "2"
    finally:
        for process in (worker, scheduler):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
        logs.close()


def _wait_for_workers(address: str, count: int) -> None:
    from distributed import Client

    deadline = time.monotonic() + 60
    while True:
        try:
            with Client(address, timeout="5s") as client:
                client.wait_for_workers(count, timeout=max(1, deadline - time.monotonic()))
                return
        except (OSError, TimeoutError):
            if time.monotonic() > deadline:
                raise


def test_recorded_gloo_run_matches_the_database_across_ranks(lake_cli, tmp_path):
    """The cross-rank task reads only the events the cross-rank stages use (sql/lake/
    cross_rank_events.sql): on a recorded two-rank gloo run whose 16 collectives all match,
    the lake's matching, offsets and cross-rank path equal the database's."""
    db, lake = tmp_path / "w.duckdb", tmp_path / "lake"
    _build_both(lake_cli, db, lake, [str(Path(__file__).parents[1] / "data" / "gloo" / "straggler")])
    _assert_same(lake_cli, db, lake)
    matched = lake_cli("query", "SELECT count(*) FILTER (WHERE matched) FROM collective_instances",
                       "-f", "csv", "--lake", str(lake))
    assert matched.out.splitlines()[1] != "0"


def test_the_engine_reads_no_event_column_the_lake_leaves_out():
    """An analyze task does not load these event columns; an engine stage that starts reading
    one must take it off the list, or the lake would analyse NULLs the database does not."""
    from ctda_sql.core import sqlfiles
    from ctda_sql.lake.tasks import ENGINE_UNREAD_EVENT_COLUMNS

    for folder in ("analysis", "crossrank"):
        for name in sqlfiles.names(folder):
            words = set(re.findall(r"[a-z_]+", sqlfiles.load(f"{folder}/{name}").lower()))
            assert not words & set(ENGINE_UNREAD_EVENT_COLUMNS), f"sql/{folder}/{name}"


# ---- the shared traces (CTDA_TRACES) -----------------------------------------------------------

@pytest.mark.parametrize("name", ["two_ranks", "nccl.json.gz"])
def test_shared_trace_lake_and_database_give_identical_results(lake_cli, shared_traces, tmp_path, name):
    db, lake = tmp_path / "w.duckdb", tmp_path / "lake"
    _build_both(lake_cli, db, lake, [str(shared_traces / name)])
    _assert_same(lake_cli, db, lake)


def test_events_partitions_are_sorted_by_time_for_pruning(lake_cli, shared_traces, tmp_path):
    """A rank's events are written in (ts_us, event_id) order, so each row group's ts_us
    statistics cover a range of their own and a time filter skips the others
    (ns_resolution: 68,692 events, two row groups)."""
    import numpy as np
    import pyarrow.parquet as pq

    lake = tmp_path / "lake"
    result = lake_cli("ingest", "-q", str(shared_traces / "ns_resolution.json.gz"), "--lake", str(lake))
    assert result.code == 0, result.err
    [part] = (lake / "events").rglob("*.parquet")
    rows = pq.read_table(part, columns=["ts_us", "event_id"])
    ts, ids = rows["ts_us"].to_numpy(), rows["event_id"].to_numpy()
    assert np.all((ts[1:] > ts[:-1]) | ((ts[1:] == ts[:-1]) & (ids[1:] > ids[:-1])))
    meta = pq.ParquetFile(part).metadata
    column = meta.schema.to_arrow_schema().get_field_index("ts_us")
    ranges = [(meta.row_group(i).column(column).statistics.min, meta.row_group(i).column(column).statistics.max)
              for i in range(meta.num_row_groups)]
    assert len(ranges) == 2 and ranges[0][1] <= ranges[1][0]


def _raw_json_bytes(path: Path) -> int:
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    total = 0
    for f in files:
        data = f.read_bytes()
        total += len(gzip.decompress(data)) if data[:2] == b"\x1f\x8b" else len(data)
    return total


def test_storage_ratio_on_the_shared_traces(lake_cli, shared_traces, tmp_path):
    """Lake bytes (the ingested tables) per raw JSON byte, printed for every shared trace; at
    most 10% for every trace of 250 KB of JSON or more. Below that the four files' fixed cost
    dominates (Parquet magic, page headers, a footer describing every column: 8-16 KB, more
    than the smallest traces' 4-67 KB of JSON)."""
    lines, over = [], []
    for source in sorted(p for p in shared_traces.iterdir() if p.name != "LICENSE-HTA"):
        lake = tmp_path / f"lake-{source.name}"
        result = lake_cli("ingest", "-q", str(source), "--lake", str(lake), "--run", "t")
        assert result.code == 0, result.err
        raw = _raw_json_bytes(source)
        stored = sum(p.stat().st_size for t in lakemod.INGEST_TABLES for p in (lake / t).rglob("*.parquet"))
        ratio = stored / raw
        lines.append(f"{source.name:40} raw {raw:>11,} B  lake {stored:>9,} B  {ratio:6.1%}")
        if raw >= 250_000 and ratio > 0.10:
            over.append(source.name)
    print("\nlake bytes / raw JSON bytes\n" + "\n".join(lines))
    assert not over, "\n".join(lines)


# ---- the shell and the Python API on a lake ----------------------------------------------------

def test_the_shell_reads_a_lake_and_refuses_to_write_it(lake_cli, tmp_path):
    from ctda_sql.shell.app import open_lake_state
    from ctda_sql.shell.commands import run_dot_command

    lake = tmp_path / "lake"
    assert lake_cli("ingest", "-q", str(_two_rank_folder(tmp_path / "small")), "--lake", str(lake)).code == 0
    assert lake_cli("analyze", "-q", "--lake", str(lake)).code == 0
    state = open_lake_state(str(lake))
    try:
        with state.holding(write=True):  # a lake attaches nothing: its tables are views
            [runs] = run_dot_command(state, ".report runs")
            columns = [d[0] for d in runs.cursor.description]
            assert [row[columns.index("run")] for row in runs.cursor.fetchall()] == ["small"]
            ranks = state.con.execute("SELECT DISTINCT rank FROM critical_path ORDER BY 1").fetchall()
            assert ranks == [(0,), (1,)]
            with pytest.raises(Exception, match="a lake is read-only in the shell"):
                run_dot_command(state, f".ingest {tmp_path / 'small'}")
            # the views keep their tables' descriptions, as a database's tables have them
            described, columns = run_dot_command(state, ".schema events")
            assert described.message.startswith("events: every traceEvent of every file")
            assert columns.rows and all(row[columns.columns.index("description")] for row in columns.rows)
    finally:
        state.con.close()


def test_the_shell_command_line_opens_a_lake(lake_cli, tmp_path):
    from tests.shell_helpers import ctda_command

    lake = tmp_path / "lake"
    assert lake_cli("ingest", "-q", str(_two_rank_folder(tmp_path / "small")), "--lake", str(lake)).code == 0
    piped = subprocess.run([*ctda_command(), "shell", "--lake", str(lake)], input="SELECT count(DISTINCT rank) AS n FROM events;",
                           capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.split() == ["n", "2"]


def test_the_python_api_ingests_analyses_and_reports_on_a_lake(cluster, tmp_path):
    from ctda_sql import Warehouse

    folder = _two_rank_folder(tmp_path / "small")
    with Warehouse(lake=tmp_path / "lake", scheduler=cluster) as wh:
        assert len(wh.ingest([folder], run="small").loaded) == 2
        wh.analyze(method="ctda")
        cpcr = wh.report("cpcr", run="small").fetchall()
        assert cpcr and wh.sql("SELECT count(*) FROM critical_path").fetchall()[0][0] > 0
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([folder], run="small")
        wh.analyze(method="ctda")
        assert sorted(wh.report("cpcr", run="small").fetchall()) == sorted(cpcr)


def test_the_python_api_refuses_workers_without_a_lake(tmp_path):
    from ctda_sql import Warehouse
    from ctda_sql.core.errors import CtdaError

    with pytest.raises(CtdaError, match="need lake"):
        Warehouse(tmp_path / "w.duckdb", workers=2)


def test_a_second_writer_is_refused_while_one_holds_the_lake(lake_cli, tmp_path):
    lake = tmp_path / "lake"
    assert lake_cli("ingest", "-q", str(_two_rank_folder(tmp_path / "small")), "--lake", str(lake)).code == 0
    before = sorted(str(p.relative_to(lake)) for p in lake.rglob("*"))
    with lakemod.sole_writer(lake):  # as a running ingest or analyze holds it
        for command in (("analyze", "-q"), ("ingest", "-q", "--replace", str(tmp_path / "small"))):
            result = lake_cli(*command, "--lake", str(lake))
            assert result.code == 1 and "another ingest or analyze is writing this lake" in result.err
            assert len(result.err.strip().splitlines()) == 1
    assert sorted(str(p.relative_to(lake)) for p in lake.rglob("*")) == before
    assert lake_cli("analyze", "-q", "--lake", str(lake)).code == 0  # released


def test_a_partition_of_many_row_groups_reads_back_exactly(tmp_path):
    """Big partitions mix zstd levels per column (lake.compression_levels); every value must
    still come back as written, strings, doubles and decimals alike."""
    import decimal

    import duckdb
    import pyarrow as pa

    rows = lakemod.ROW_GROUP_ROWS * 2 + 17
    table = pa.table({
        "event_id": pa.array(range(rows), pa.int64()),
        "name": pa.array([f"aten::op_{i % 37}" for i in range(rows)]),
        "ts_us": pa.array([i * 1.25 + 0.001 for i in range(rows)], pa.float64()),
        "dur_us": pa.array([(i % 101) / 3 for i in range(rows)], pa.float64()),
        "ts_raw": pa.array([decimal.Decimal(1712195495519689047 + i) / 1000 for i in range(rows)],
                           pa.decimal128(38, 6)),
        "args": pa.array([f'{{"External id": {i}, "Sequence number": {i * 7}}}' for i in range(rows)]),
    })
    assert isinstance(lakemod.compression_levels(table), dict)  # the mixed levels are what runs here
    path = tmp_path / "part-0.parquet"
    lakemod.write_parquet(table, path)
    back = duckdb.connect().sql(f"SELECT * FROM read_parquet('{path}') ORDER BY event_id").to_arrow_table()
    assert back.equals(table)


def test_a_lone_task_gets_every_core():
    """A run's cross-rank task runs alone once the per-rank tasks are done: its DuckDB gets all
    the cores, not a worker's share, while tasks that run side by side share them."""
    from ctda_sql.lake.cluster import threads_per_task

    class TwoWorkers:
        def scheduler_info(self):
            return {"workers": {"tcp://a": {}, "tcp://b": {}}}

    cores = os.cpu_count() or 1
    assert threads_per_task(TwoWorkers(), 1) == cores
    assert threads_per_task(TwoWorkers(), 5) == threads_per_task(TwoWorkers()) == max(1, cores // 2)


# ---- issue 35 --------------------------------------------------------------------------------

GLOO_STRAGGLER = Path(__file__).parents[1] / "data" / "gloo" / "straggler"


def test_an_analysis_replaces_the_previous_one_whole_on_a_lake(lake_cli, tmp_path):
    """`analyze --window ProfilerStep` then `analyze`: the lake keeps no rows of the annotation
    windows (numbered 1..N, so the plain analyze did not overwrite them all), as the database."""
    db, lake = tmp_path / "w.duckdb", tmp_path / "lake"
    _build_both(lake_cli, db, lake, [str(GLOO_STRAGGLER)])
    before = lake_cli("query", "SELECT count(*) FROM analysis_windows", "-f", "csv", "--lake", str(lake)).out
    for args in (("--window", "ProfilerStep"), ()):
        assert lake_cli("analyze", "-q", *args, db=db).code == 0
        result = lake_cli("analyze", "-q", *args, "--lake", str(lake))
        assert result.code == 0, result.err
    assert lake_cli("query", "SELECT count(*) FROM analysis_windows", "-f", "csv", "--lake", str(lake)).out == before
    _assert_same(lake_cli, db, lake)


@pytest.fixture(scope="module")
def ingested_lake(cluster, tmp_path_factory) -> Path:
    """A lake of run `two` (two ranks), ingested once; tests damage copies of it."""
    from ctda_sql import Warehouse

    root = tmp_path_factory.mktemp("ingested")
    with Warehouse(lake=root / "lake", scheduler=cluster) as wh:
        wh.ingest([_two_rank_folder(root / "small")], run="two")
    return root / "lake"


def _copy_of(lake: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(lake, tmp_path / "lake")
    return tmp_path / "lake"


def _files(lake: Path) -> dict[str, bytes]:
    return {str(p.relative_to(lake)): p.read_bytes() for p in sorted(lake.rglob("*")) if p.is_file()}


def _one_error(result) -> str:
    lines = result.err.strip().splitlines()
    assert result.code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.err
    assert "Traceback" not in result.err
    return lines[0]


@pytest.mark.parametrize("target", ["events/run=two/rank=0/zz.parquet", "runs.parquet", "elsewhere.parquet"])
def test_safe_on_a_lake_is_read_only(lake_cli, ingested_lake, tmp_path, target):
    """--safe let SQL COPY into the lake (rows every later reader saw, or a broken runs.parquet)."""
    lake = _copy_of(ingested_lake, tmp_path)
    before = _files(lake)
    copy = f"COPY (SELECT 1 AS x) TO '{lake / target}' (FORMAT parquet)"
    _one_error(lake_cli("query", copy, "--lake", str(lake), "--safe"))
    assert _files(lake) == before
    ok = lake_cli("query", "SELECT count(DISTINCT rank) FROM events", "-f", "csv", "--lake", str(lake), "--safe")
    assert ok.code == 0 and ok.out.splitlines()[1] == "2", ok.err


def test_a_lake_that_lost_runs_parquet_is_refused(lake_cli, ingested_lake, tmp_path):
    """A new ingest took run id 1 again and `report runs` showed it with the old run's ranks."""
    lake = _copy_of(ingested_lake, tmp_path)
    (lake / "runs.parquet").unlink()
    before = _files(lake)
    more = tmp_path / "more.json"
    training_trace(0, 1).write(more)
    for args in (("ingest", "-q", str(more), "--run", "more"), ("analyze", "-q"), ("report", "runs"),
                 ("query", "SELECT 1")):
        line = _one_error(lake_cli(*args, "--lake", str(lake)))
        assert "runs.parquet is missing" in line and "two" in line
    assert _files(lake) == before


@pytest.mark.parametrize("damage", ["empty", "garbage", "folder", "tmp_file", "lock_folder"])
def test_a_damaged_lake_gives_one_error_line(lake_cli, ingested_lake, tmp_path, damage):
    """runs.parquet empty, garbage or a folder; a file where a folder goes: tracebacks before."""
    lake = _copy_of(ingested_lake, tmp_path)
    runs = lake / "runs.parquet"
    if damage == "empty":
        runs.write_bytes(b"")
    elif damage == "garbage":
        runs.write_bytes(b"not parquet at all\n")
    elif damage == "folder":
        runs.unlink()
        runs.mkdir()
    elif damage == "tmp_file":  # a stray file named like the staging folder: ingest still works
        (lake / "_tmp").write_text("x")
    elif damage == "lock_folder":
        (lake / lakemod.WRITER_LOCK).unlink(missing_ok=True)
        (lake / lakemod.WRITER_LOCK).mkdir()
    more = tmp_path / "more.json"
    training_trace(0, 1).write(more)
    result = lake_cli("ingest", "-q", str(more), "--run", "more", "--lake", str(lake))
    if damage == "tmp_file":
        assert result.code == 0, result.err
        return
    line = _one_error(result)
    assert ("runs.parquet" in line) if damage != "lock_folder" else (lakemod.WRITER_LOCK in line)
    _one_error(lake_cli("analyze", "-q", "--lake", str(lake)))


def test_a_lost_events_partition_is_named_and_analyze_refuses_the_run(lake_cli, ingested_lake, tmp_path):
    """`query` counted the events that were left while `report runs` counted all; analyze then
    overwrote good paths with paths of part of the events."""
    import shutil

    lake = _copy_of(ingested_lake, tmp_path)
    shutil.rmtree(lake / "events" / "run=two" / "rank=1")
    line = _one_error(lake_cli("analyze", "-q", "--lake", str(lake)))
    assert "run two" in line and "rank(s) 1 have no events partition" in line
    read = lake_cli("query", "SELECT count(*) FROM steps", "--lake", str(lake))
    assert read.code == 0 and "warning: " in read.err and "rank(s) 1 have no events partition" in read.err


def test_orphan_partitions_and_stray_files_are_not_read_as_data(lake_cli, ingested_lake, tmp_path):
    import shutil

    lake = _copy_of(ingested_lake, tmp_path)
    count = ("SELECT count(*), count(DISTINCT rank), count(DISTINCT run_id) FROM steps", "-f", "csv")
    before = lake_cli("query", *count, "--lake", str(lake)).out
    steps = lake / "steps" / "run=two"
    shutil.copytree(steps, lake / "steps" / "run=zzz")
    shutil.copytree(steps / "rank=0", steps / "rank=abc")
    shutil.copytree(steps / "rank=0", steps / "rank=7")
    (steps / "rank=7" / lakemod.PART_FILE).rename(steps / "rank=7" / "part-0.parquet.bak")
    (steps / "rank=0" / "notes.txt").write_text("not data")
    for safe in ((), ("--safe",)):
        after = lake_cli("query", *count, "--lake", str(lake), *safe)
        assert after.code == 0 and after.out == before, after.err
        assert "not read as data (no partition of a listed run" in after.err and "rank=abc" in after.err


def test_an_unfinished_ingest_is_reported_until_it_is_run_again(lake_cli, ingested_lake, tmp_path):
    """A killed `ingest --replace` left a run mixing ranks of two recordings, and nothing warned."""
    lake = _copy_of(ingested_lake, tmp_path)
    lakemod.mark_ingest_pending(lake, "two")  # what a killed ingest of run two leaves
    read = lake_cli("query", "SELECT 1", "--lake", str(lake))
    assert read.code == 0 and "run two: an ingest of it did not finish" in read.err
    assert "did not finish" in _one_error(lake_cli("analyze", "-q", "--lake", str(lake)))
    again = lake_cli("ingest", "-q", str(ingested_lake.parent / "small"), "--run", "two", "--replace", "--lake", str(lake))
    assert again.code == 0, again.err
    assert lake_cli("query", "SELECT 1", "--lake", str(lake)).err == ""
    assert lake_cli("analyze", "-q", "--lake", str(lake)).code == 0


# ---- issue 43: what the integrity check finds, and the lake on every command -------------------

@pytest.fixture(scope="module")
def analysed_lake(cluster, ingested_lake, tmp_path_factory) -> tuple[Path, str]:
    """A copy of ingested_lake analysed with every method; and analyze's summary."""
    import shutil

    from ctda_sql import Warehouse

    lake = tmp_path_factory.mktemp("analysed") / "lake"
    shutil.copytree(ingested_lake, lake)
    with Warehouse(lake=lake, scheduler=cluster) as wh:
        summary = wh.analyze()
    return lake, summary


def _query(lake_cli, lake: Path, sql: str):
    result = lake_cli("query", sql, "-f", "csv", "--lake", str(lake))
    assert result.code == 0, result.err
    return result


def test_analyze_names_the_run_in_each_cross_rank_line(analysed_lake):
    """analyze --lake printed one `cross_rank:` line per run without its name."""
    _, summary = analysed_lake
    [line] = [line.strip() for line in summary.splitlines() if "cross_rank" in line]
    assert re.fullmatch(r"cross_rank: run 'two': \d+/\d+ collective instances matched.*", line), summary


def test_a_lost_traces_partition_of_a_rank_is_named_and_analyze_refuses(lake_cli, analysed_lake, tmp_path):
    """With rank 1's traces partition deleted, `report runs` counted rank 0's events and
    `events` both ranks', and analyze exited 0 keeping rank 1's cross-rank path beside the
    new one: a step counted twice. A rank is in the lake when its traces partition is."""
    import shutil

    lake = _copy_of(analysed_lake[0], tmp_path)
    on_rank_1 = "SELECT count(*) FROM critical_path WHERE method = 'cross_rank' AND rank = 1"
    assert _query(lake_cli, lake, on_rank_1).out.splitlines()[1] != "0"  # the path runs on rank 1
    shutil.rmtree(lake / "traces" / "run=two" / "rank=1")
    before = _files(lake)
    line = _one_error(lake_cli("analyze", "-q", "--lake", str(lake)))
    assert "run two: rank(s) 1 have no traces partition" in line
    assert _files(lake) == before
    runs = lake_cli("report", "runs", "-f", "csv", "--lake", str(lake))
    assert runs.code == 0 and "rank(s) 1 have no traces partition" in runs.err
    [row] = list(csv.DictReader(io.StringIO(runs.out)))
    events = _query(lake_cli, lake, "SELECT count(*), count(DISTINCT rank) FROM events")
    assert events.out.splitlines()[1] == f"{row['events']},1" and row["ranks"] == "1"
    # rank 1's stale cross-rank path is not read (an analyze would have added rank 0's beside it)
    assert _query(lake_cli, lake, on_rank_1).out.splitlines()[1] == "0"


def test_a_run_whose_traces_are_lost_stays_listed_when_another_run_is_ingested(lake_cli, ingested_lake, tmp_path):
    """The next ingest of another run dropped the run from runs.parquet without a word."""
    import shutil

    lake = _copy_of(ingested_lake, tmp_path)
    shutil.rmtree(lake / "traces" / "run=two")
    more = tmp_path / "more.json"
    training_trace(0, 1).write(more)
    result = lake_cli("ingest", "-q", str(more), "--run", "more", "--lake", str(lake))
    assert result.code == 0, result.err
    assert [r["name"] for r in lakemod.read_runs(lake)] == ["two", "more"]
    read = lake_cli("query", "SELECT name FROM runs ORDER BY run_id", "-f", "csv", "--lake", str(lake))
    assert read.code == 0 and read.out.split() == ["name", "two", "more"]
    assert "run two: rank(s) 0, 1 have no traces partition" in read.err
    line = _one_error(lake_cli("analyze", "-q", "--lake", str(lake), "--run", "two"))
    assert "rank(s) 0, 1 have no traces partition" in line
    # the healthy run is analysed as ever
    assert lake_cli("analyze", "-q", "--lake", str(lake), "--run", "more").code == 0


def test_a_stray_parquet_file_in_a_partition_is_named_and_not_read(lake_cli, ingested_lake, tmp_path):
    """A copy of rank 1's events file beside rank 0's was read as rank 0's data (1,007 more
    events in the probe): only the files the layout names are data."""
    import shutil

    clean = _copy_of(ingested_lake, tmp_path / "clean")
    lake = _copy_of(ingested_lake, tmp_path)
    stray = lake / "events" / "run=two" / "rank=0" / "part-1.parquet"
    shutil.copyfile(lake / "events" / "run=two" / "rank=1" / lakemod.PART_FILE, stray)
    count = "SELECT rank, count(*) FROM events GROUP BY rank ORDER BY rank"
    read = _query(lake_cli, lake, count)
    assert read.out == _query(lake_cli, clean, count).out
    [warning] = read.err.strip().splitlines()
    assert warning.startswith("warning: ") and "events/run=two/rank=0/part-1.parquet" in warning
    # nor does analyze read it: the same paths as without it
    analysed = lake_cli("analyze", "-q", "--method", "ctda", "--lake", str(lake))
    assert analysed.code == 0, analysed.err
    assert analysed.out == lake_cli("analyze", "-q", "--method", "ctda", "--lake", str(clean)).out
    path = "SELECT rank, count(*), sum(counted_us) FROM critical_path GROUP BY rank ORDER BY rank"
    assert _query(lake_cli, lake, path).out == _query(lake_cli, clean, path).out
    assert stray.is_file()  # named, left to the user


def test_a_garbled_events_file_is_named_first_and_the_rest_is_read(lake_cli, ingested_lake, tmp_path):
    """One garbled events file made every read of the lake fail with DuckDB's message."""
    lake = _copy_of(ingested_lake, tmp_path)
    (lake / "events" / "run=two" / "rank=1" / lakemod.PART_FILE).write_bytes(b"PAR1 garbled beyond repair")
    steps = lake_cli("query", "SELECT count(DISTINCT rank) FROM steps", "-f", "csv", "--lake", str(lake))
    assert steps.code == 0 and steps.out.splitlines()[1] == "2", steps.err
    [warning] = steps.err.strip().splitlines()
    assert warning.startswith(f"warning: lake {lake}: run two: events/run=two/rank=1/part-0.parquet cannot be "
                              "read (not a Parquet file)"), warning
    events = _query(lake_cli, lake, "SELECT list(DISTINCT rank) FROM events")
    assert events.out.splitlines()[1] == "[0]"
    before = _files(lake)
    line = _one_error(lake_cli("analyze", "-q", "--lake", str(lake)))
    assert "events/run=two/rank=1/part-0.parquet cannot be read" in line
    assert _files(lake) == before


def test_an_ingest_that_cannot_replace_runs_parquet_leaves_nothing_behind(cluster, ingested_lake, tmp_path,
                                                                           monkeypatch):
    """It left its temporary runs files, and a "did not finish" warning about a run that was
    never in the lake."""
    from ctda_sql import Warehouse
    from ctda_sql.core.errors import CtdaError
    from ctda_sql.lake.integrity import lake_warnings

    lake = _copy_of(ingested_lake, tmp_path)
    more = tmp_path / "more.json"
    training_trace(0, 1).write(more)
    before = _files(lake)
    real_replace = os.replace

    def no_runs_replace(src, dst):
        if Path(dst).name == lakemod.RUNS_FILE:
            raise PermissionError(13, "Permission denied", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", no_runs_replace)
    with Warehouse(lake=lake, scheduler=cluster) as wh, pytest.raises(CtdaError, match="Permission denied"):
        wh.ingest([more], run="more")
    monkeypatch.setattr(os, "replace", real_replace)
    assert _files(lake) == before
    assert lake_warnings(lake) == []
    assert lakemod.pending_ingests(lake) == []


def test_a_pending_mark_of_a_run_the_lake_does_not_hold_is_not_reported(ingested_lake, tmp_path):
    """What an ingest killed before it wrote its run leaves: no run, so no warning."""
    from ctda_sql.lake.integrity import lake_warnings

    lake = _copy_of(ingested_lake, tmp_path)
    lakemod.mark_ingest_pending(lake, "ghost")
    assert lake_warnings(lake) == []


# ---- export and whatif on a lake from the command line -----------------------------------------

@pytest.fixture(scope="module")
def db_and_lake(cluster, tmp_path_factory) -> tuple[Path, Path]:
    """Run `small` (two ranks) ingested and analysed into a database and into a lake."""
    from ctda_sql import Warehouse

    root = tmp_path_factory.mktemp("pair")
    folder = _two_rank_folder(root / "small")
    db, lake = root / "w.duckdb", root / "lake"
    with Warehouse(db) as wh:
        wh.ingest([folder], run="small")
        wh.analyze()
    with Warehouse(lake=lake, scheduler=cluster) as wh:
        wh.ingest([folder], run="small")
        wh.analyze()
    return db, lake


@pytest.mark.parametrize("args", [
    ("--scale", "kernel:*=0.5"),
    ("--comm-bandwidth-scale", "2", "--no-coupling"),
    ("--sweep", "comm-latency-us=1,50"),
])
def test_whatif_on_a_lake_run_gives_the_databases_numbers(run_cli, db_and_lake, args):
    """`whatif --lake` was refused on the command line (the Python API took a lake)."""
    db, lake = db_and_lake
    files = _files(lake)
    on_db = run_cli("whatif", "--run", "small", *args, "-f", "csv", db=db)
    on_lake = run_cli("whatif", "--run", "small", *args, "-f", "csv", "--lake", str(lake))
    assert on_db.code == 0 and on_lake.code == 0, on_db.err + on_lake.err
    assert on_lake.err == ""
    assert _cells(on_lake.out) == _cells(on_db.out) and len(_cells(on_lake.out)) > 2
    assert _files(lake) == files  # printed, not stored: the lake is read-only here


def test_export_overlay_and_html_of_a_lake_run(run_cli, db_and_lake, tmp_path):
    """`export --lake` was refused on the command line (the Python API took a lake)."""
    import json

    db, lake = db_and_lake
    overlays = {}
    for where, option in (("db", ()), ("lake", ("--lake", str(lake)))):
        out = tmp_path / f"{where}.json"
        done = run_cli("export", "overlay", "--run", "small", "--method", "all", "-o", str(out), *option, db=db)
        assert done.code == 0, done.err
        assert done.out.startswith(f"wrote {out}: run 'small' rank(s) 0, 1")
        overlays[where] = json.loads(out.read_text())
    assert overlays["lake"] == overlays["db"]
    html = tmp_path / "lake.html"
    done = run_cli("export", "html", "--run", "small", "-o", str(html), "--lake", str(lake))
    assert done.code == 0, done.err
    assert done.out.startswith(f"wrote {html}: run 'small', ") and "Gantt of rank" in done.out
    text = html.read_text()
    assert text.lstrip().lower().startswith("<!doctype html") and "small" in text


def test_export_and_whatif_refuse_a_missing_lake_in_one_line(run_cli, tmp_path):
    for args in (("whatif",), ("export", "html", "--run", "x", "-o", str(tmp_path / "x.html"))):
        result = run_cli(*args, "--lake", str(tmp_path / "none"))
        assert result.code == 1 and result.err.strip().splitlines() == [
            f"error: no lake at {tmp_path / 'none'}; run `ctda-sql ingest --lake {tmp_path / 'none'} PATH` first"]
        assert not (tmp_path / "none").exists()
