"""Real traces ($CTDA_TRACES): every file ingests losslessly, steps, ranks and autograd threads."""

from __future__ import annotations

import gzip
import json
import os
import re
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from ctda_sql.core.connection import connect
from ctda_sql.ingest.load import default_run_name, ingest

_FOLDER = Path(os.environ.get("CTDA_TRACES", "/nonexistent"))
# collected when the tier is on; with no files the parametrized tests skip (no traces to check)
SHARED_FILES = sorted(p.name for p in _FOLDER.glob("*.json.gz")) if _FOLDER.is_dir() else []
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


def load_trace(path: Path) -> list[dict]:
    """traceEvents with numbers as Decimal, so timestamps keep every digit of the file."""
    with gzip.open(path, "rt") as handle:
        return json.load(handle, parse_float=Decimal)["traceEvents"]


@pytest.fixture(scope="module")
def shared_db(shared_traces, tmp_path_factory) -> Path:
    """One database holding every shared trace file as its own run, plus two_ranks/ as one run."""
    db_path = tmp_path_factory.mktemp("shared") / "shared.duckdb"
    con = connect(db_path)
    try:
        for name in SHARED_FILES:
            ingest(con, [shared_traces / name], show_progress=False)
        ingest(con, [shared_traces / "two_ranks"], show_progress=False)
    finally:
        con.close()
    return db_path


def fetch(db_path: Path, sql: str, params: list | dict | None = None) -> list[tuple]:
    with duckdb.connect(str(db_path), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def run_rows(db_path: Path, sql: str, file_name: str) -> list[tuple]:
    """`sql` with $run bound to the run_id a shared file was ingested as."""
    run = fetch(db_path, "SELECT run_id FROM runs WHERE name = ?", [default_run_name([file_name])])
    return fetch(db_path, sql, {"run": run[0][0]})


@pytest.mark.parametrize("file_name", SHARED_FILES)
def test_every_event_of_the_file_is_stored(shared_traces, shared_db, file_name):
    events = load_trace(shared_traces / file_name)
    counts = run_rows(shared_db, "SELECT event_count, (SELECT count(*) FROM events WHERE run_id = $run) "
                                 "FROM traces WHERE run_id = $run", file_name)
    assert counts == [(len(events), len(events))]


@pytest.mark.parametrize("file_name", SHARED_FILES)
def test_names_and_timestamps_match_the_file_exactly(shared_traces, shared_db, file_name):
    events = load_trace(shared_traces / file_name)
    rows = run_rows(shared_db, "SELECT name, ts_raw FROM events WHERE run_id = $run ORDER BY event_id",
                    file_name)
    assert [r[0] for r in rows] == [e["name"] for e in events]
    assert [r[1] for r in rows] == [Decimal(str(e["ts"]).strip('"')) for e in events]


def profiler_steps(events: list[dict]) -> set[int]:
    """Step numbers of the CPU-side ProfilerStep#N annotations (GPU copies left out)."""
    cpu = (e for e in events if e.get("ph") == "X" and not str(e.get("cat", "")).startswith("gpu_"))
    return {int(m.group(1)) for e in cpu if (m := _STEP_NAME.match(e["name"]))}


@pytest.mark.parametrize("file_name", SHARED_FILES)
def test_steps_follow_profiler_step_annotations(shared_traces, shared_db, file_name):
    expected = profiler_steps(load_trace(shared_traces / file_name))
    rows = run_rows(shared_db, "SELECT step, whole_trace FROM steps WHERE run_id = $run", file_name)
    if expected:
        assert {r[0] for r in rows} == expected and not any(r[1] for r in rows)
    else:
        assert rows == [(0, True)]


def test_two_ranks_folder_is_one_run_with_ranks_0_and_1(shared_db):
    rows = fetch(shared_db, "SELECT r.name, t.rank, t.rank_source FROM traces t JOIN runs r USING (run_id) "
                            "WHERE r.name = 'two_ranks' ORDER BY t.rank")
    assert rows == [("two_ranks", 0, "distributedInfo"), ("two_ranks", 1, "distributedInfo")]


def test_two_ranks_share_one_time_origin(shared_db):
    """Ranks of one job started within a second of each other; on one origin they line up."""
    starts = fetch(shared_db, "SELECT min(start_us) FROM steps JOIN runs USING (run_id) "
                              "WHERE runs.name = 'two_ranks' GROUP BY rank")
    assert len(starts) == 2
    assert abs(starts[0][0] - starts[1][0]) < 1e6


@pytest.mark.parametrize("run", ["nccl", "ns_resolution", "two_ranks"])
def test_autograd_thread_is_recognised(shared_db, run):
    rows = fetch(shared_db, "SELECT rank, count(*) FILTER (WHERE role = 'autograd'), "
                            "count(*) FILTER (WHERE role = 'main') "
                            "FROM threads JOIN runs USING (run_id) WHERE runs.name = ? GROUP BY rank", [run])
    assert rows and all(autograd >= 1 and main == 1 for _, autograd, main in rows), rows


def test_ns_resolution_trace_is_marked_ns_with_exact_differences(shared_db):
    rows = fetch(shared_db, "SELECT time_resolution FROM traces JOIN runs USING (run_id) "
                            "WHERE name = 'ns_resolution'")
    assert rows == [("ns",)]
    # ts_us - ts_raw is the same constant (the run origin) for every event: no rounding
    spread = fetch(shared_db, "SELECT max(ts_us - (ts_raw - origin_ts)::DOUBLE) - "
                              "min(ts_us - (ts_raw - origin_ts)::DOUBLE) FROM events "
                              "JOIN runs USING (run_id) WHERE runs.name = 'ns_resolution'")
    assert spread[0][0] < 1e-6
    # a float64 parse of epoch µs keeps only quarter-µs steps; the file's ns digits survive
    off_grid = fetch(shared_db, "SELECT count(*) FROM events JOIN runs USING (run_id) "
                                "WHERE runs.name = 'ns_resolution' AND (ts_raw * 1000) % 250 <> 0")
    assert off_grid[0][0] > 0
