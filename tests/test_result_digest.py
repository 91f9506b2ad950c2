"""The counted-time sweep of issue 32 gives the same rows as the statement it replaced.

Issue 32 replaced cp_segments (sql/analysis/60_counted.sql), whose `running` range join took
time quadratic in a non-nested window's members, with a sweep over dyadic blocks. Every
result table that depends on it (path_events' self time, critical_path's counted time, the
reports and what-if over them) is computed from cp_segments by unchanged statements, and
nodes and edges are made before it; so "every result table identical before and after" holds
exactly when cp_segments is identical.

Why not a stored digest of the result tables, computed once on the code before the change:
other stages change this session and later (the hand-off inference of 30_gpu_nodes.sql moves
nodes and edges on some traces, legitimately), and a stored digest would then fail for a
change that is not this one, or be regenerated until it checks nothing. Instead each test
runs `analyze` with today's engine, then runs the old statement, kept verbatim in
tests/data/old_cp_segments.sql, on the same temp tables in the same connection, and compares
the two tables row for row (as multisets; no rounding: both sum the same doubles). It stays
valid however the stages before it evolve, on every shared trace (skipped without
$CTDA_TRACES), every recorded trace of tests/data, and random windows built to be non-nested
(ties, duplicates, zero-length members, members crossing the window's ends).

The same holds for the nodes' python frames (cp_node_events), whose range join on the thread
issue 32 replaced with positions from one ordered pass: the old macro, kept verbatim in
tests/data/old_cp_node_events.sql, runs beside the new one on random with_stack-like traces
(no shared or recorded trace holds python frames). And for the sync edges' candidates
(cp_edges), found by positions in GPU-node end order instead of a range join on the step: the
old statement, tests/data/old_cp_edges.sql, runs beside it on every input above. And for
what-if's sync dependencies (wi_edge_times, sql/whatif/15_graph.sql), a running arg_max per
stream and an ASOF join instead of a join with every earlier GPU node of the window:
tests/data/old_wi_edge_times.sql beside it after `whatif` on the recorded what-if runs.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ctda_sql.core import sqlfiles
from ctda_sql.engine.analyze import AnalysisSettings, analyze
from ctda_sql.core.connection import connect
from ctda_sql.ingest.load import ingest

DATA = Path(__file__).parent / "data"
OLD_STATEMENT = (DATA / "old_cp_segments.sql").read_text(encoding="utf-8")

def differences(con, new: str, old: str) -> list[tuple]:
    """Rows of `new` not in `old` and of `old` not in `new` (tables, or table macro calls),
    counting duplicates; the first ten."""
    return con.execute(f"""
        SELECT 'new only' AS side, * FROM (SELECT * FROM {new} EXCEPT ALL SELECT * FROM {old})
        UNION ALL
        SELECT 'old only', * FROM (SELECT * FROM {old} EXCEPT ALL SELECT * FROM {new})
        ORDER BY ALL LIMIT 10""").fetchall()


def stage_statement(table: str) -> str:
    """The statement of 60_counted.sql that makes `table`."""
    for statement, _ in sqlfiles.parameterized_statements(sqlfiles.load("analysis/60_counted.sql")):
        if f"TEMP TABLE {table} AS" in statement:
            return statement
    raise AssertionError(f"60_counted.sql makes no {table}")


def assert_same_segments(con) -> int:
    """Run the old statement beside analyze's cp_segments; returns the segment count."""
    con.execute(OLD_STATEMENT)
    assert differences(con, "cp_segments", "old_cp_segments") == []
    return con.execute("SELECT count(*) FROM cp_segments").fetchone()[0]


def non_nested_windows(con) -> int:
    """Windows where the sweep's owner ends before its segment: the case the change is about."""
    return con.execute("""
        WITH owned AS (
            SELECT *, last_value(CASE WHEN delta = 1 THEN -nesting_order END IGNORE NULLS) OVER (
                PARTITION BY counted_window_id, depth ORDER BY ord ROWS UNBOUNDED PRECEDING) AS owner_end_us
            FROM cp_points)
        SELECT count(DISTINCT counted_window_id) FROM owned WHERE depth > 0 AND owner_end_us <= t""").fetchone()[0]


def analyzed_runs(folder: Path, inputs: dict[str, Path]):
    """One warehouse holding every input as a run of its own, analysed with every method."""
    con = connect(folder / "digest.duckdb")
    for name, path in inputs.items():
        ingest(con, [path], run_name=name, show_progress=False)
    analyze(con, show_progress=False)
    return con


def recorded_inputs() -> dict[str, Path]:
    """tests/data's recordings, as bench/result_digest.py lists them."""
    found = {f"cuda-{p.name}": p for p in sorted((DATA / "cuda").glob("*.json.gz"))}
    found |= {f"gloo-{p.name}": p for p in sorted((DATA / "gloo").iterdir()) if p.is_dir()}
    found |= {f"whatif-{p.name}": p for p in sorted((DATA / "whatif").glob("*-r1.json.gz"))}
    return found


def test_recorded_traces_keep_their_segments(tmp_path):
    con = analyzed_runs(tmp_path, recorded_inputs())
    assert assert_same_segments(con) > 1000
    assert assert_same_edges(con) > 100
    con.close()


def test_shared_traces_keep_their_segments(tmp_path, shared_traces):
    inputs = {p.name: p for p in sorted(shared_traces.iterdir())
              if p.name.endswith(".json.gz") or (p.is_dir() and any(p.glob("*.json*")))}
    con = analyzed_runs(tmp_path, inputs)
    assert assert_same_segments(con) > 1000
    assert assert_same_edges(con) > 10
    con.close()


def random_members(rng: random.Random, windows: int) -> tuple[list[tuple], list[tuple]]:
    """(counted windows, path members): members on a coarse grid of instants, so that starts
    and ends tie, some listed twice, some of zero length, some running past the window."""
    window_rows, member_rows = [], []
    for window_id in range(1, windows + 1):
        start, end = float(rng.randint(0, 20)), float(rng.randint(60, 100))
        window_rows.append((window_id, start, end))
        for _ in range(rng.randint(1, 60)):
            ts = float(rng.randint(-10, 100))
            end_us = ts + rng.choice([0.0, 1.0, 2.0, 5.0, 30.0, float(rng.randint(1, 60))])
            event_id = rng.randint(1, 400)
            copies = 2 if rng.random() < 0.05 else 1
            member_rows += [(window_id, start, end, event_id, ts, end_us)] * copies
    return window_rows, member_rows


def test_random_windows_keep_their_segments():
    import duckdb
    import pyarrow as pa

    rng = random.Random(32)
    window_rows, member_rows = random_members(rng, 400)
    cp_counted_windows = pa.Table.from_pylist(
        [dict(zip(("counted_window_id", "counted_start_us", "counted_end_us"), row)) for row in window_rows])
    cp_path_members = pa.Table.from_pylist(
        [dict(zip(("counted_window_id", "counted_start_us", "counted_end_us", "event_id", "ts_us", "end_us"), row),
              name="op", cat="cpu_op") for row in member_rows])
    con = duckdb.connect()
    con.execute("CREATE TEMP TABLE cp_counted_windows AS SELECT * FROM cp_counted_windows")
    con.execute("CREATE TEMP TABLE cp_path_members AS SELECT counted_window_id, counted_start_us, counted_end_us, "
                "event_id, name, cat, ts_us, end_us FROM cp_path_members")
    con.execute(stage_statement("cp_points"))
    con.execute(stage_statement("cp_segments"))
    assert non_nested_windows(con) > 300  # the case under test, not only the nested sweep
    assert assert_same_segments(con) > 5000


@pytest.mark.parametrize("overlap_at", [0, 7, 19])
def test_an_event_overlapping_its_parent_keeps_the_segments(tmp_path, overlap_at):
    """One step on one thread: 20 ops each holding a child, one child running past its
    parent's end (the shape of issue 32's slow production node)."""
    from ctda_sql.tracebuilder import TraceBuilder

    builder = TraceBuilder(rank=0)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=300)
    for i in range(20):
        builder.cpu_op(main, "aten::linear", ts=5 + i * 10, dur=8)
        builder.cpu_op(main, "aten::addmm", ts=6 + i * 10, dur=9.5 if i == overlap_at else 6)
    con = analyzed_runs(tmp_path, {"overlap": builder.write(tmp_path / "trace.json")})
    assert non_nested_windows(con) >= 1
    assert assert_same_segments(con) >= 40
    con.close()


# ---- python frames: positions from one ordered pass, not a range join on the thread -------

OLD_NODE_EVENTS = (DATA / "old_cp_node_events.sql").read_text(encoding="utf-8")


def assert_same_node_events(con) -> int:
    """Make the old cp_node_events macro beside analyze's and compare both macros' rows, for
    the counted windows' nodes and for all nodes; returns the python frames held by nodes."""
    con.execute(OLD_NODE_EVENTS)
    for counted_only in ("true", "false"):
        assert differences(con, f"cp_node_events({counted_only})", f"old_cp_node_events({counted_only})") == []
    return con.execute(
        "SELECT count(*) FROM cp_node_events(false) WHERE cat = 'python_function'").fetchone()[0]


OLD_EDGES = (DATA / "old_cp_edges.sql").read_text(encoding="utf-8")


def assert_same_edges(con) -> int:
    """Run the old cp_edges statement (sync candidates by a range join on the step) beside
    analyze's and compare the rows; returns the sync edges."""
    con.execute(OLD_EDGES, {"sync_tolerance_us": AnalysisSettings().sync_tolerance_us})
    assert differences(con, "cp_edges", "old_cp_edges") == []
    return con.execute("SELECT count(*) FROM cp_edges WHERE type = 'sync'").fetchone()[0]


def framed_trace(rng: random.Random, steps: int = 3):
    """Steps of ops on a main and an autograd thread, some launching kernels on two streams
    (stream switches make nodes), some holding a blocking sync (wait-return nodes), and python
    frames on a coarse grid of instants: starting and ending on node bounds, of zero length,
    at one instant twice, spanning several nodes, outside every node."""
    from ctda_sql.tracebuilder import TraceBuilder

    builder = TraceBuilder(rank=0)
    main = builder.thread(100, "pt_main_thread")
    grad = builder.thread(101, "pt_autograd_0")
    builder.stream(7)
    builder.stream(8)
    t = 0
    for step in range(1, steps + 1):
        step_start = t
        for _ in range(rng.randint(20, 50)):
            lane = main if rng.random() < 0.8 else grad
            dur = rng.choice([2, 4, 6, 10])
            builder.cpu_op(lane, "aten::op", ts=t, dur=dur)
            if rng.random() < 0.5:
                builder.launch(lane, ts=t + 1, dur=1, kernel="k", stream=rng.choice([7, 8]),
                               kernel_ts=t + rng.choice([2, 3]), kernel_dur=rng.choice([1, 2, 5, 30]))
            if dur >= 6 and rng.random() < 0.4:
                builder.runtime(lane, "cudaDeviceSynchronize", ts=t + 2, dur=dur - 3)
            t += dur + rng.choice([0, 0, 1, 3])
        for _ in range(rng.randint(30, 90)):
            lane = main if rng.random() < 0.8 else grad
            ts = rng.randint(step_start - 5, t + 5)
            dur = rng.choice([0, 1, 2, 4, 6, rng.randint(1, 80)])
            for _ in range(2 if rng.random() < 0.1 else 1):  # some frames at the same instant
                builder.python_function(lane, f"train.py({ts}): f", ts=ts, dur=dur)
        builder.step(step, main, ts=step_start, dur=t - step_start)
        t += 2
    return builder


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_python_frames_keep_their_nodes(tmp_path, seed):
    rng = random.Random(seed)
    inputs = {f"framed-{k}": framed_trace(rng).write(tmp_path / f"framed-{k}.json") for k in range(3)}
    con = analyzed_runs(tmp_path, inputs)
    assert assert_same_node_events(con) > 50
    assert assert_same_edges(con) > 10  # the ops' blocking syncs, kernels ending on their bounds
    con.close()


# ---- what-if: a wait return's sync dependencies by a running arg_max, not a join ---------

OLD_WHATIF_EDGES = (DATA / "old_wi_edge_times.sql").read_text(encoding="utf-8")


def assert_same_whatif_edges(con) -> int:
    """Replay every window (what-if's temp tables stay in the connection), run the old
    wi_edge_times statement beside the new one and compare; returns the edge count."""
    from ctda_sql.whatif.replay import whatif

    whatif(con, persist=False)
    con.execute(OLD_WHATIF_EDGES)
    assert differences(con, "wi_edge_times", "old_wi_edge_times") == []
    return con.execute("SELECT count(*) FROM wi_edge_times").fetchone()[0]


def test_whatif_keeps_its_sync_dependencies(tmp_path):
    """The recorded what-if runs (syncs, copies, graphs, DDP) and random framed traces, whose
    ops hold device-wide syncs with kernels on two streams ending on their bounds."""
    rng = random.Random(5)
    inputs = {f"whatif-{p.name}": p for p in sorted((DATA / "whatif").glob("*-r1.json.gz"))}
    inputs |= {f"cuda-{p.name}": p for p in sorted((DATA / "cuda").glob("item_sync*.json.gz"))}
    inputs |= {f"framed-{k}": framed_trace(rng).write(tmp_path / f"framed-{k}.json") for k in range(3)}
    con = analyzed_runs(tmp_path, inputs)
    assert assert_same_whatif_edges(con) > 1000
    assert con.execute("SELECT count(*) FROM wi_edge_times AS e JOIN wi_nodes AS d "
                       "ON d.window_index = e.window_index AND d.seq = e.dst_seq "
                       "WHERE d.wait_end_us IS NOT NULL").fetchone()[0] > 50
    con.close()
