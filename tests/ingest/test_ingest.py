"""Ingest: lossless events, exact timestamps, ranks, steps, thread roles, re-ingest and runs."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from ctda_sql.testing.tracebuilder import TraceBuilder


def fetch(db_path: Path, sql: str, params: list | None = None) -> list[tuple]:
    """Rows of one query on a read-only connection that is closed right away."""
    with duckdb.connect(str(db_path), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def file_events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)["traceEvents"]


# ---- lossless ---------------------------------------------------------------------------

def every_kind_trace(b: TraceBuilder) -> TraceBuilder:
    """One event of each kind Kineto writes, with the extra keys flows and instants carry."""
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, ts=0, dur=100)
    op = b.cpu_op(main, "aten::mm", ts=10, dur=30, **{"Input Dims": [[2, 3], [3, 4]]})
    b.events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "s": "t",
                     "pid": b.pid, "tid": 100, "ts": b.base_ts + 15, "args": {"Bytes": 64}})
    b.events.append({"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 7,
                     "pid": b.pid, "tid": 100, "ts": op["ts"]})
    b.events.append({"ph": "f", "cat": "fwdbwd", "name": "fwdbwd", "id": 7, "bp": "e",
                     "pid": b.pid, "tid": 100, "ts": b.base_ts + 60})
    b.events.append({"ph": "C", "name": "GPU 0 memory", "pid": b.pid, "tid": 100,
                     "ts": b.base_ts + 70, "args": {"allocated": 1.5}})
    return b


def test_every_event_is_kept_in_file_order_with_args_and_extra_keys(builder, tmp_path, run_cli, db_path):
    path = every_kind_trace(builder).write(tmp_path / "kinds.json")
    assert run_cli("ingest", str(path)).code == 0
    expected = file_events(path)
    rows = fetch(db_path, "SELECT event_id, name, ph, args, extra FROM events ORDER BY event_id")
    assert [r[0] for r in rows] == list(range(len(expected)))
    assert [(r[1], r[2]) for r in rows] == [(e["name"], e["ph"]) for e in expected]
    assert {"X", "i", "s", "f", "M", "C"} <= {r[2] for r in rows}
    for row, event in zip(rows, expected):
        assert (json.loads(row[3]) if row[3] else None) == event.get("args")


def test_flow_and_instant_keys_land_in_extra(builder, tmp_path, run_cli, db_path):
    path = every_kind_trace(builder).write(tmp_path / "kinds.json")
    run_cli("ingest", str(path))
    extras = dict(fetch(db_path, "SELECT ph, extra FROM events WHERE ph IN ('i', 's', 'f')"))
    assert json.loads(extras["i"]) == {"s": "t"}
    assert json.loads(extras["s"]) == {"id": 7}
    assert json.loads(extras["f"]) == {"id": 7, "bp": "e"}


def test_event_count_matches_trace_events(builder, tmp_path, run_cli, db_path):
    path = every_kind_trace(builder).write(tmp_path / "kinds.json.gz")
    run_cli("ingest", str(path))
    counted = fetch(db_path, "SELECT (SELECT count(*) FROM events), event_count FROM traces")
    assert counted == [(len(file_events(path)),) * 2]


# ---- timestamps -------------------------------------------------------------------------

NS_TS = ("1712195495519689.047", "1712195495519689.048", "1712195495519790.999")


def ns_trace_text() -> str:
    """Timestamps with nanosecond digits, written as text: a float64 would round them."""
    events = [
        f'{{"ph": "X", "cat": "cpu_op", "name": "op{i}", "pid": 1, "tid": 1, "ts": {ts}, "dur": 1.5}}'
        for i, ts in enumerate(NS_TS)
    ]
    return '{"distributedInfo": {"rank": 0}, "traceEvents": [' + ", ".join(events) + "]}"


def test_nanosecond_digits_are_kept_exactly(tmp_path, run_cli, db_path):
    path = tmp_path / "ns.json"
    path.write_text(ns_trace_text())
    run_cli("ingest", str(path))
    rows = fetch(db_path, "SELECT ts_raw, ts_us FROM events ORDER BY event_id")
    assert [r[0] for r in rows] == [Decimal(ts) for ts in NS_TS]
    assert rows[1][1] - rows[0][1] == pytest.approx(0.001, abs=1e-9)
    assert rows[2][1] - rows[0][1] == pytest.approx(101.952, abs=1e-9)
    assert fetch(db_path, "SELECT time_resolution FROM traces") == [("ns",)]


def test_whole_microsecond_trace_is_us_resolution(builder, tmp_path, run_cli, db_path):
    every_kind_trace(builder).write(tmp_path / "us.json")
    run_cli("ingest", str(tmp_path / "us.json"))
    assert fetch(db_path, "SELECT time_resolution FROM traces") == [("us",)]


def test_ranks_of_one_run_share_the_time_origin(tmp_path, run_cli, db_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (0, 1):
        b = TraceBuilder(rank=rank)
        b.step(1, b.thread(100), ts=1000.5 * rank + 3, dur=10)  # rank 1 starts 1000.5 µs later
        b.write(folder / f"rank-{rank}.json")
    run_cli("ingest", str(folder))
    starts = dict(fetch(db_path, "SELECT rank, start_us FROM steps"))
    assert starts[1] - starts[0] == pytest.approx(1000.5, abs=1e-9)
    origin = fetch(db_path, "SELECT origin_ts FROM runs")[0][0]
    assert origin == Decimal(TraceBuilder().base_ts + 3)
    assert starts[0] == pytest.approx(0.0)


def _rank_folder(folder: Path, ranks: int) -> Path:
    folder.mkdir()
    for rank in range(ranks):
        every_kind_trace(TraceBuilder(rank=rank)).write(folder / f"rank-{rank}.json.gz")
    return folder


def _parse_folders() -> set[Path]:
    import os
    import tempfile

    return set(Path(tempfile.gettempdir()).glob(f"ctda-parse-{os.getpid()}-*"))


def test_ranks_parsed_in_worker_processes_land_as_when_parsed_in_process(tmp_path, run_cli, monkeypatch):
    """Big batches are parsed by a process pool whose workers spill each file's events to an
    Arrow file; the rows must be the ones the in-process parse gives, and nothing is left."""
    import ctda_sql.ingest.load

    folder = _rank_folder(tmp_path / "job", ranks=3)
    before = _parse_folders()
    assert run_cli("ingest", str(folder), db=tmp_path / "in_process.duckdb").code == 0
    monkeypatch.setattr(ctda_sql.ingest.load, "_POOL_MIN_JSON_BYTES", 0)
    result = run_cli("ingest", str(folder), db=tmp_path / "pool.duckdb")
    assert result.code == 0, result.err
    query = "SELECT * EXCLUDE (run_id) FROM events ORDER BY rank, event_id"
    pooled = fetch(tmp_path / "pool.duckdb", query)
    assert len(pooled) == 3 * len(file_events(folder / "rank-0.json.gz"))
    assert pooled == fetch(tmp_path / "in_process.duckdb", query)
    assert _parse_folders() == before


def test_a_bad_rank_parsed_in_a_worker_leaves_no_spilled_events(tmp_path, run_cli, db_path, monkeypatch):
    import ctda_sql.ingest.load

    folder = _rank_folder(tmp_path / "job", ranks=2)
    (folder / "rank-2.json").write_text('{"traceEvents": [{"name": "x", "ph": "X"')
    before = _parse_folders()
    monkeypatch.setattr(ctda_sql.ingest.load, "_POOL_MIN_JSON_BYTES", 0)
    result = run_cli("ingest", str(folder))
    assert result.code != 0 and "rank-2.json" in result.err
    assert _parse_folders() == before
    assert not db_path.exists() or fetch(db_path, "SELECT count(*) FROM events") == [(0,)]


def test_a_batch_holds_one_files_events_in_memory_at_a_time(tmp_path, monkeypatch):
    """Spilled events are mapped for their own insert only and let go right after (a view
    registered in the transaction held every file's table until the commit: 1.9 GB of
    mapped events at 16 ranks x 480k); the rows after a file's last whole row group wait as
    a copy, not as the file."""
    import ctda_sql.ingest.load
    from ctda_sql.core.connection import connect
    from ctda_sql.ingest.traceio import parse_folder

    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(3):
        _write_many_events(folder / f"rank-{rank}.json", 130_000)  # a row group and a bit
    monkeypatch.setattr(ctda_sql.ingest.load, "_POOL_MIN_JSON_BYTES", 0)
    with parse_folder() as spill:
        parsed = ctda_sql.ingest.load.parse_files(sorted(folder.iterdir()), False, Path(spill))
        assert [t.events for t in parsed] == [None] * 3  # on disk, not in memory

        def mapped_spill_files() -> int:
            return sum(spill in line for line in Path("/proc/self/maps").read_text().splitlines())

        held, real_insert = [], ctda_sql.ingest.load._insert_rows
        monkeypatch.setattr(ctda_sql.ingest.load, "_insert_rows",
                            lambda con, rows, params: held.append(mapped_spill_files()) or real_insert(con, rows, params))
        con = connect(tmp_path / "batch.duckdb")
        con.execute("BEGIN")
        run_id = ctda_sql.ingest.load._get_or_create_run(con, "batch", {}, parsed)
        ctda_sql.ingest.load.insert_events(con, parsed, run_id)
        # a whole row group of each file (after the previous file's left-over rows) while that
        # file alone is mapped, then the batch's left-over rows
        assert held == [1, 1, 1, 0]
        assert mapped_spill_files() == 0
        assert con.execute("SELECT count(*), count(DISTINCT rank) FROM events").fetchone() == (390_000, 3)
        con.execute("COMMIT")
        con.close()


def test_odd_but_recoverable_fields_are_kept_and_counted_in_one_warning(tmp_path, run_cli):
    """Each oddity is counted once (by the parse worker), the events are kept, and the user
    gets one warning line naming them."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "no_dur", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "X", "cat": "cpu_op", "name": "string_pid", "pid": "proc", "tid": 1, "ts": 2, "dur": 1},
        {"ph": "X", "name": "no_cat", "pid": 1, "tid": 1, "ts": 3, "dur": 1},
        {"ph": "f", "cat": "ac2g", "name": "flow", "id": 7, "bp": "e", "pid": 1, "tid": 1, "ts": 4},
        {"ph": "X", "cat": "cpu_op", "name": "custom_key", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "custom": 3},
        {"ph": "X", "cat": "cpu_op", "name": "plain", "pid": 1, "tid": 1, "ts": 6, "dur": 1},
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": events}))
    result = run_cli("ingest", str(path), "--verbose")
    assert result.code == 0
    assert ("warning: odd.json: kept events with odd but recoverable fields: 1 complete events without dur; "
            "1 events without cat; 1 events with extra keys beyond the Kineto ones") in result.err
    # every real Kineto trace has these two: a note, and only with --verbose
    note = "note: odd.json: kept events with odd but recoverable fields: 1 string pid/tid lanes; 1 flow ends without a start"
    assert note in result.err
    assert note not in run_cli("ingest", str(path), "--run", "again").err
    assert run_cli("query", "SELECT count(*) AS n FROM events", "--format", "csv").out.split() == ["n", "6"]


def _write_many_events(path: Path, count: int) -> None:
    """A one-thread trace of `count` back-to-back cpu ops (rows for several row groups)."""
    ops = ",".join(f'{{"ph":"X","cat":"cpu_op","name":"aten::op","pid":1,"tid":1,"ts":{index * 2},"dur":1}}'
                   for index in range(count))
    path.write_text(f'{{"traceEvents":[{ops}]}}')


def test_a_parallel_insert_keeps_file_order_in_whole_row_groups(tmp_path):
    """Events go in on every thread, yet in file order and in full row groups: a part-filled
    row group per thread or per file is rewritten by the next checkpoint, which left 40% of a
    16-rank database free, and scans give each file's order."""
    from ctda_sql.core.connection import connect
    from ctda_sql.ingest.load import ingest
    from ctda_sql.ingest.traceio import DUCKDB_ROW_GROUP_ROWS

    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(2):
        _write_many_events(folder / f"rank-{rank}.json", 250_000)  # two row groups and a part
    con = connect(tmp_path / "big.duckdb")
    con.execute("SET threads = 2")
    ingest(con, [folder], show_progress=False)
    con.execute("CHECKPOINT")
    free, total = con.execute("SELECT free_blocks, total_blocks FROM pragma_database_size()").fetchone()
    assert free <= total // 10
    out_of_order = con.execute(
        "SELECT count(*) FROM (SELECT rank, lag(rank) OVER (ORDER BY rowid) AS previous_rank, "
        "event_id - lag(event_id) OVER (ORDER BY rowid) AS id_step FROM events) "
        "WHERE rank = previous_rank AND id_step <> 1").fetchone()[0]
    assert out_of_order == 0
    row_groups = con.execute("SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('events')").fetchone()[0]
    assert row_groups == -(-2 * 250_000 // DUCKDB_ROW_GROUP_ROWS)  # all full but the last
    con.close()


def test_the_events_insert_has_an_order_keeping_parallel_plan(tmp_path):
    """DuckDB inserts in parallel and in order only through its batch insert, which any step
    of the plan that does not keep order rules out: an IN list of five or more names (as in
    is_device_category) is planned as a MARK join and made the insert an unordered one."""
    from ctda_sql.core.connection import connect
    from ctda_sql.ingest.load import _events_sql, with_file_columns
    from ctda_sql.ingest.traceio import read_trace

    trace = read_trace(every_kind_trace(TraceBuilder(rank=0)).write(tmp_path / "rank-0.json"))
    con = connect(tmp_path / "plan.duckdb")
    con.execute("SET threads = 2")
    typed_events = with_file_columns(trace, trace.events)  # noqa: F841 (read by the SQL)
    plan = con.execute("EXPLAIN " + _events_sql(), {"run_id": 1, "origin_ts": 0}).fetchall()[0][1]
    assert "Batch Insert" in plan
    con.close()


def test_events_are_regrouped_into_row_group_batches_without_change():
    import pyarrow as pa

    from ctda_sql.ingest.traceio import DUCKDB_ROW_GROUP_ROWS, in_row_group_batches

    rows = 2 * DUCKDB_ROW_GROUP_ROWS + 5
    table = pa.table({"event_id": pa.array(range(rows), pa.int64())}).to_batches(max_chunksize=100_000)
    regrouped = in_row_group_batches(pa.Table.from_batches(table))
    assert [b.num_rows for b in regrouped.to_batches()] == [DUCKDB_ROW_GROUP_ROWS] * 2 + [5]
    assert regrouped["event_id"].to_pylist() == list(range(rows))
    assert in_row_group_batches(regrouped) is regrouped  # already aligned: no copy


def test_no_room_to_stage_parsed_events_is_one_clear_error(tmp_path):
    """A worker that cannot write its spill file (full or missing temp folder) raises the
    user's error, not an OSError traceback."""
    from ctda_sql.core.errors import CtdaError
    from ctda_sql.ingest.traceio import read_trace

    trace = read_trace(every_kind_trace(TraceBuilder(rank=0)).write(tmp_path / "rank-0.json"))
    with pytest.raises(CtdaError, match="cannot stage its parsed events in .*set TMPDIR"):
        trace.spill_events(tmp_path / "gone" / "events-0.arrow")
    assert trace.events is not None  # nothing was let go


# ---- ranks ------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("file_name", "info_rank", "rank", "source"),
    [
        ("trace.json", 5, 5, "distributedInfo"),
        ("worker_rank-3.json", None, 3, "file name"),
        ("rank3.json.gz", None, 3, "file name"),
        ("rank-7.json", 2, 2, "distributedInfo"),
        ("trace.json", None, 0, "default"),
    ],
)
def test_rank_comes_from_distributed_info_then_file_name_then_zero(
    tmp_path, run_cli, db_path, file_name, info_rank, rank, source
):
    b = TraceBuilder(rank=info_rank)
    b.cpu_op(b.thread(100), "aten::add", ts=0, dur=5)
    result = run_cli("ingest", str(b.write(tmp_path / file_name)))
    assert f"rank {rank} (from {source})" in result.out
    assert fetch(db_path, "SELECT rank, rank_source FROM traces") == [(rank, source)]


def test_folder_of_rank_files_is_one_run_with_every_rank(tmp_path, run_cli, db_path):
    folder = tmp_path / "job42"
    folder.mkdir()
    for rank in range(4):
        b = TraceBuilder(rank=None)
        b.step(1, b.thread(100), ts=rank, dur=10)
        b.write(folder / f"rank-{rank}.json.gz")
    result = run_cli("ingest", str(folder))
    assert result.code == 0
    assert fetch(db_path, "SELECT name FROM runs") == [("job42",)]
    assert fetch(db_path, "SELECT rank FROM traces ORDER BY rank") == [(r,) for r in range(4)]


# ---- steps ------------------------------------------------------------------------------

def test_one_step_per_profiler_step_annotation(builder, tmp_path, run_cli, db_path):
    main = builder.thread(100, "pt_main_thread")
    for number, start in ((4, 0), (5, 100), (6, 250)):
        builder.step(number, main, ts=start, dur=90)
        builder.cpu_op(main, "aten::mm", ts=start + 5, dur=50)
    run_cli("ingest", str(builder.write(tmp_path / "steps.json")))
    rows = fetch(db_path, "SELECT step, name, start_us, end_us, whole_trace FROM steps ORDER BY step")
    # steps partition the timeline: each runs to the next one's start, the last to its end
    assert rows == [
        (4, "ProfilerStep#4", 0.0, 100.0, False),
        (5, "ProfilerStep#5", 100.0, 250.0, False),
        (6, "ProfilerStep#6", 250.0, 340.0, False),
    ]


def test_trace_without_steps_gets_one_whole_trace_step(builder, tmp_path, run_cli, db_path):
    main = builder.thread(100)
    builder.cpu_op(main, "aten::add", ts=10, dur=5)
    builder.launch(main, ts=20, dur=3, kernel="add_kernel", stream=7, kernel_ts=30, kernel_dur=40)
    result = run_cli("ingest", str(builder.write(tmp_path / "nosteps.json")))
    assert "one whole-trace step" in result.out
    rows = fetch(db_path, "SELECT start_us, end_us, whole_trace FROM steps")
    assert rows == [(0.0, 60.0, True)]


# ---- threads ----------------------------------------------------------------------------

def roles(db_path: Path) -> dict[str, str]:
    return dict(fetch(db_path, "SELECT tid, role FROM threads"))


def test_autograd_thread_found_by_its_name(builder, tmp_path, run_cli, db_path):
    main = builder.thread(100, "pt_main_thread")
    autograd = builder.thread(200, "pt_autograd_0")
    builder.step(1, main, ts=0, dur=100)
    builder.cpu_op(main, "aten::mm", ts=5, dur=10)
    builder.cpu_op(autograd, "aten::mm", ts=50, dur=10)
    builder.launch(main, ts=6, dur=2, kernel="gemm", stream=7, kernel_ts=10, kernel_dur=5)
    run_cli("ingest", str(builder.write(tmp_path / "named.json")))
    assert roles(db_path) == {"100": "main", "200": "autograd", "7": "stream"}


def test_autograd_thread_found_by_backward_nodes_when_names_are_generic(builder, tmp_path, run_cli, db_path):
    main = builder.thread(100, "python3")
    backward = builder.thread(200, "python3")
    builder.step(1, main, ts=0, dur=100)
    builder.cpu_op(main, "aten::linear", ts=5, dur=10)
    builder.cpu_op(backward, "autograd::engine::evaluate_function: MmBackward0", ts=50, dur=10)
    run_cli("ingest", str(builder.write(tmp_path / "generic.json")))
    assert roles(db_path) == {"100": "main", "200": "autograd"}


def test_accumulate_grad_on_the_main_thread_does_not_make_it_autograd(builder, tmp_path, run_cli, db_path):
    main = builder.thread(100, "pt_main_thread")
    poller = builder.thread(300)
    builder.step(1, main, ts=0, dur=100)
    builder.cpu_op(main, "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", ts=5, dur=5)
    builder.cpu_op(main, "torch::autograd::AccumulateGrad", ts=6, dur=3)
    builder.runtime(poller, "cudaEventQuery", ts=20, dur=0)
    run_cli("ingest", str(builder.write(tmp_path / "accumulate.json")))
    assert roles(db_path) == {"100": "main", "300": "other"}


# ---- re-ingest, replace, metadata -------------------------------------------------------

def test_same_file_again_is_skipped_with_a_message(builder, tmp_path, run_cli, db_path):
    path = every_kind_trace(builder).write(tmp_path / "again.json")
    run_cli("ingest", str(path))
    second = run_cli("ingest", str(path))
    assert second.code == 0
    assert "already ingested" in second.err and "--replace" in second.err
    assert "0 loaded, 1 skipped" in second.out
    assert fetch(db_path, "SELECT count(*) FROM traces") == [(1,)]


def test_replace_reloads_without_duplicates(builder, tmp_path, run_cli, db_path):
    path = every_kind_trace(builder).write(tmp_path / "again.json")
    run_cli("ingest", str(path))
    before = fetch(db_path, "SELECT count(*) FROM events")[0][0]
    result = run_cli("ingest", str(path), "--replace")
    assert result.code == 0 and "1 loaded" in result.out
    counts = fetch(db_path, "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM traces), "
                            "(SELECT count(*) FROM steps), (SELECT count(*) FROM runs)")
    assert counts == [(before, 1, 1, 1)]


def test_meta_lands_in_runs_with_numbers_typed(builder, tmp_path, run_cli, db_path):
    path = every_kind_trace(builder).write(tmp_path / "meta.json")
    run_cli("ingest", str(path), "--run", "exp1", "--meta", "batch_size=32",
            "--meta", "lr=0.001", "--meta", "framework=fsdp")
    name, meta = fetch(db_path, "SELECT name, meta FROM runs")[0]
    assert name == "exp1"
    assert json.loads(meta) == {"batch_size": 32, "lr": 0.001, "framework": "fsdp"}


def test_meta_without_equals_sign_is_an_error(builder, tmp_path, run_cli):
    path = every_kind_trace(builder).write(tmp_path / "meta.json")
    result = run_cli("ingest", str(path), "--meta", "batch_size")
    assert result.code == 1 and result.err.startswith("error:") and "KEY=VALUE" in result.err


def test_skipped_file_under_a_new_run_name_leaves_no_empty_run(builder, tmp_path, run_cli, db_path):
    path = every_kind_trace(builder).write(tmp_path / "again.json")
    run_cli("ingest", str(path), "--run", "first")
    second = run_cli("ingest", str(path), "--run", "second", "--meta", "note=retry")
    assert "already ingested as run first" in second.err
    assert fetch(db_path, "SELECT name, meta FROM runs") == [("first", "{}")]


# ---- a big events array typed in parts, one thread each --------------------------------

def _many_events_trace(path: Path, count: int, bad_at: int | None = None) -> Path:
    """`count` cpu ops on one thread, with every kind of odd field ingest keeps (a flow event
    with extra keys, string pid/tid, a duration as text); event `bad_at` gets a ts that is
    not a number."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, count * 2 + 10)
    for i in range(count):
        b.cpu_op(main, f"aten::op_{i % 7}", 1 + i * 2, 1.5)
    trace = b.write(path)
    document = json.loads(trace.read_text())
    document["traceEvents"].append({"ph": "f", "id": 7, "bp": "e", "pid": "100", "tid": "100", "ts": 3,
                                    "cat": "ac2g", "name": "ac2g"})
    document["traceEvents"][5]["dur"] = "1.5"
    if bad_at is not None:
        document["traceEvents"][bad_at]["ts"] = "soon"
    trace.write_text(json.dumps(document, indent=1))
    return trace


@pytest.fixture
def small_parts(monkeypatch):
    """Split arrays of any size into parts of 1,000 events (the real minimum is a row group)."""
    import ctda_sql.ingest.traceio as traceio

    monkeypatch.setattr(traceio, "_SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(traceio, "_PART_MIN_EVENTS", 1_000)
    return traceio


def test_an_array_typed_in_parts_gives_the_events_of_the_whole(tmp_path, small_parts):
    trace = _many_events_trace(tmp_path / "many.json", 3_500)
    whole = small_parts.read_trace(trace, duckdb_threads=1)
    for threads in (2, 3):
        parted = small_parts.read_trace(trace, duckdb_threads=threads)
        assert parted.events.equals(whole.events)
        assert parted.events["event_id"].to_pylist() == list(range(whole.events.num_rows))
        assert (parted.min_ts, parted.odd_field_counts) == (whole.min_ts, whole.odd_field_counts)


def test_the_parts_are_consecutive_slices_of_the_array(tmp_path, small_parts):
    import msgspec

    text = _many_events_trace(tmp_path / "many.json", 3_500).read_bytes()
    array = memoryview(msgspec.json.decode(text, type=dict[str, msgspec.Raw])["traceEvents"])
    parts = small_parts._array_parts(array, 3)
    assert [first for _, first in parts] == [0, 1_000, 2_000]
    events = json.loads(bytes(array))
    for (part, first), following in zip(parts, [1_000, 2_000, len(events)]):
        assert json.loads(b"[" + bytes(part) + b"]") == events[first:following]


def test_a_bad_event_in_a_later_part_gives_the_whole_arrays_message(tmp_path, small_parts):
    from ctda_sql.core.errors import BadTraceError

    trace = _many_events_trace(tmp_path / "bad.json", 3_500, bad_at=2_600)
    messages = []
    for threads in (1, 2):
        with pytest.raises(BadTraceError) as raised:
            small_parts.read_trace(trace, duckdb_threads=threads)
        messages.append(str(raised.value))
    assert messages[0] == messages[1] and "event 2600 has a non-numeric ts" in messages[1]
