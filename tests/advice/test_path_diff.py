"""The path diff (`diff`, report `path_diff`): why one run's median step differs from another's,
decomposed along the critical paths, rows plus a named remainder adding up to the difference
exactly. Hand-made pairs whose answer is derived by hand, then recorded pairs (CPU torch runs
with a change made for real: tests/data/whatif, tests/data/gloo)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ctda_sql.advice.diff import diff
from ctda_sql.core.connection import connect
from ctda_sql.core.errors import CtdaError
from ctda_sql.engine.analyze import analyze
from ctda_sql.engine.reports import find_report, run_report
from ctda_sql.ingest.load import ingest
from ctda_sql.testing.tracebuilder import TraceBuilder

from helpers.jobs import collective
from helpers.pairs import STEPS, training_trace

DATA = Path(__file__).parents[1] / "data"
def assert_adds_up(document: dict) -> None:
    """Rows plus the remainder are the step difference, to the last bit, in the rows' order."""
    total = 0.0
    for row in document["rows"]:
        assert row["delta_us"] == row["b_us"] - row["a_us"]
        total += row["delta_us"]
    assert total + document["unexplained_us"] == document["delta_us"]
    assert document["delta_us"] == document["step_b_us"] - document["step_a_us"]
    deltas = [abs(row["delta_us"]) for row in document["rows"]]
    assert deltas == sorted(deltas, reverse=True)


def row(document: dict, kind: str, label: str) -> dict:
    [found] = [r for r in document["rows"] if r["kind"] == kind and r["label"] == label]
    return found


def share_on(document: dict, *names: str) -> float:
    """The part of the step difference on rows whose label names one of `names`."""
    on = sum(r["delta_us"] for r in document["rows"] if any(name in r["label"] for name in names))
    return on / document["delta_us"]


# ---- hand-made pairs ---------------------------------------------------------------------------

def job_traces(folder: Path, slow_us: float) -> list[Path]:
    """Two ranks, STEPS steps: compute, a gloo all-reduce, an update. Rank 1 first sleeps
    `slow_us` in a `slow_rank` annotation, so both ranks wait for it at the all-reduce and
    every rank's step is `slow_us` longer."""
    folder.mkdir(parents=True, exist_ok=True)
    step_us = 400 + slow_us
    paths = []
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2, pid=1000 + rank)
        main, worker = b.thread(100 + rank, "pt_main_thread"), b.thread(500 + rank, "gloo worker")
        for number in range(1, STEPS + 1):
            t0 = (number - 1) * step_us
            b.step(number, main, ts=t0, dur=step_us - 10)
            late = slow_us if rank == 1 else 0
            if late:
                b.annotation(main, "slow_rank", ts=t0 + 10, dur=slow_us)
            b.cpu_op(main, "aten::mm", ts=t0 + 10 + late, dur=100)
            arrival = t0 + 120 + late
            end = t0 + 120 + slow_us + 150
            collective(b, main, worker, arrival, arrival + 2, end, [0, 1])
            b.cpu_op(main, "aten::add_", ts=end + 5, dur=50)
        paths.append(b.write(folder / f"rank-{rank}.json.gz"))
    return paths


@pytest.fixture(scope="module")
def handmade(tmp_path_factory):
    folder = tmp_path_factory.mktemp("path_diff")
    con = connect(folder / "w.duckdb")
    single = {
        "loading": training_trace(data_loading_us=10_000),
        "no_loading": training_trace(),
        "compute_1ms": training_trace(compute_us=1000),
        "with_item": training_trace(item_us=500),
        "nested": nested_trace(),
        "loader_stall": training_trace(loader_stall_us=7000),
    }
    for name, builder in single.items():
        ingest(con, [builder.write(folder / f"{name}.json")], run_name=name, show_progress=False)
    for name, slow in (("even", 0), ("slow", 5000)):
        ingest(con, job_traces(folder / name, slow), run_name=name, show_progress=False)
    analyze(con, show_progress=False)
    yield con
    con.close()


def test_removed_data_loading_is_minus_its_time_on_its_row(handmade):
    document = diff(handmade, "loading", "no_loading")
    assert_adds_up(document)
    assert document["delta_us"] == -10_000
    assert row(document, "annotation", "data_loading") == {
        "kind": "annotation", "label": "data_loading", "a_us": 10_000, "b_us": 0, "delta_us": -10_000}
    # nothing else changed: every other row is unchanged, and nothing is left unexplained
    assert document["rows"][0]["label"] == "data_loading"
    assert all(r["delta_us"] == 0 for r in document["rows"][1:])
    assert document["unexplained_us"] == 0


def test_added_data_loading_appears_with_the_opposite_sign(handmade):
    document = diff(handmade, "no_loading", "loading")
    assert_adds_up(document)
    assert row(document, "annotation", "data_loading")["delta_us"] == 10_000 == document["delta_us"]


def test_a_shrunk_annotation_shrinks_its_row_with_everything_inside(handmade):
    document = diff(handmade, "no_loading", "compute_1ms")
    assert_adds_up(document)
    compute = row(document, "annotation", "compute")
    assert (compute["a_us"], compute["b_us"], compute["delta_us"]) == (4000, 1000, -3000)
    assert document["delta_us"] == -3000 and document["unexplained_us"] == 0
    # the op inside the annotation is counted there, never twice
    assert not [r for r in document["rows"] if r["label"] == "aten::mm"]


def test_an_op_outside_annotations_appears_as_an_op_row(handmade):
    document = diff(handmade, "no_loading", "with_item")
    assert_adds_up(document)
    assert row(document, "op", "aten::item") == {
        "kind": "op", "label": "aten::item", "a_us": 0, "b_us": 500, "delta_us": 500}
    assert document["delta_us"] == 500
    # the 10 us before it moved from a gap (not on the path) into the op's node (idle there)
    assert all(abs(r["delta_us"]) <= 10 for r in document["rows"][1:])


def test_a_gap_while_a_helper_thread_ran_is_a_wait_on_it(handmade):
    # the main thread waits 7 ms with no annotation of its own while the loader thread runs
    # `loader_stall`: the gap is named for it, as a wait (inferred from timing)
    document = diff(handmade, "no_loading", "loader_stall")
    assert_adds_up(document)
    assert row(document, "wait", "loader_stall") == {
        "kind": "wait", "label": "loader_stall", "a_us": 0, "b_us": 7000, "delta_us": 7000}
    assert document["delta_us"] == 7000 and document["unexplained_us"] == 0


def test_a_run_against_itself_differs_by_nothing(handmade):
    document = diff(handmade, "loading", "loading")
    assert_adds_up(document)
    assert document["delta_us"] == 0 and document["unexplained_us"] == 0
    assert all(r["delta_us"] == 0 and r["a_us"] == r["b_us"] for r in document["rows"])


def test_a_slow_rank_is_named_with_its_rank_on_the_jobs_path(handmade):
    document = diff(handmade, "even", "slow")
    assert_adds_up(document)
    assert document["delta_us"] == 5000
    assert row(document, "annotation", "rank 1: slow_rank")["delta_us"] == 5000
    assert share_on(document, "slow_rank", "rank 1") >= 0.8


def test_one_ranks_diff_reads_that_ranks_windows_and_path(handmade):
    document = diff(handmade, "even", "slow", rank=1)
    assert_adds_up(document)
    assert document["delta_us"] == 5000
    assert row(document, "annotation", "slow_rank") == {
        "kind": "annotation", "label": "slow_rank", "a_us": 0, "b_us": 5000, "delta_us": 5000}
    assert all(not r["label"].startswith("rank ") for r in document["rows"])


def nested_trace() -> TraceBuilder:
    """Annotations that start together, touch, nest three deep, and one on the autograd thread
    while the main thread waits: every way a stretch of time finds its innermost annotation."""
    b = TraceBuilder(rank=0)
    main, autograd = b.thread(100, "pt_main_thread"), b.thread(200, "pt_autograd_0")
    for number in range(1, STEPS + 1):
        t = (number - 1) * 1000.0
        b.step(number, main, ts=t, dur=990)
        b.annotation(main, "outer", ts=t + 10, dur=490)
        b.annotation(main, "first", ts=t + 10, dur=190)
        b.cpu_op(main, "aten::mm", ts=t + 20, dur=150)
        b.annotation(main, "second", ts=t + 200, dur=200)
        b.cpu_op(main, "aten::relu", ts=t + 205, dur=40)
        b.annotation(main, "deep", ts=t + 250, dur=50)
        b.cpu_op(main, "aten::add", ts=t + 255, dur=40)
        b.cpu_op(main, "aten::sum", ts=t + 420, dur=60)
        b.cpu_op(main, "aten::mean", ts=t + 520, dur=30)
        b.cpu_op(main, "autograd::engine::evaluate_function: MmBackward0", ts=t + 560, dur=5)
        b.annotation(autograd, "bwd_region", ts=t + 600, dur=200)
        b.cpu_op(autograd, "autograd::engine::evaluate_function: AddBackward0", ts=t + 610, dur=150)
        b.cpu_op(main, "aten::add_", ts=t + 850, dur=100)
    return b


def annotation_time_by_hand(con, run: str) -> dict[str, float]:
    """Path time per innermost annotation of a one-rank run's median step, walked directly:
    every CPU gap and counted window, cut at every annotation boundary."""
    run_id = con.execute("SELECT run_id FROM runs WHERE name = ?", [run]).fetchone()[0]
    windows = con.execute("SELECT step, start_us + window_us, window_us FROM analysis_windows "
                          "WHERE run_id = ? ORDER BY window_us, step", [run_id]).fetchall()
    step, window_end, _ = windows[(len(windows) - 1) // 2]
    path = con.execute("SELECT kind, counted_start_us - gap_before_us, counted_start_us, counted_end_us "
                       "FROM critical_path WHERE run_id = ? AND step = ? AND method = 'ctda' ORDER BY seq",
                       [run_id, step]).fetchall()
    pieces = [(start, end) for kind, gap, counted, finish in path if kind == "cpu"
              for start, end in ((gap, counted), (counted, finish)) if end > start]
    pieces.append((path[-1][3], window_end))
    annotations = con.execute(
        "SELECT e.name, e.ts_us, e.end_us FROM events e JOIN threads t USING (run_id, rank, pid, tid) "
        "WHERE e.run_id = ? AND e.cat = 'user_annotation' AND e.ph = 'X' AND t.role IN ('main', 'autograd') "
        "AND NOT starts_with(e.name, 'ProfilerStep#')", [run_id]).fetchall()
    cuts = sorted({t for _, start, end in annotations for t in (start, end)} | {t for p in pieces for t in p})
    totals: dict[str, float] = {}
    for start, end in pieces:
        for left, right in zip(cuts, cuts[1:]):
            if left >= start and right <= end:
                around = [a for a in annotations if a[1] <= left and a[2] >= right]
                if around:
                    name = max(around, key=lambda a: (a[1], -a[2]))[0]
                    totals[name] = totals.get(name, 0.0) + right - left
    return totals


@pytest.mark.parametrize("run", ["nested", "loading"])
def test_annotation_rows_are_the_path_time_inside_each_innermost_annotation(handmade, run):
    rows = {r["label"]: r["a_us"] for r in diff(handmade, run, run)["rows"] if r["kind"] == "annotation"}
    assert rows == {name: math.floor(us + 0.5) for name, us in annotation_time_by_hand(handmade, run).items()}


# ---- the report ------------------------------------------------------------------------------

def report_rows(con, run_a: str, run_b: str, rank: int | None = None) -> list[dict]:
    cursor = run_report(con, find_report("path_diff"), {"run_a": run_a, "run_b": run_b, "rank": rank})
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, values)) for values in cursor.fetchall()]


@pytest.mark.parametrize("pair", [("loading", "no_loading", None), ("even", "slow", None), ("even", "slow", 0)])
def test_the_report_gives_the_documents_rows_then_the_remainder_and_the_step(handmade, pair):
    document = diff(handmade, *pair)
    rows = report_rows(handmade, *pair)
    assert rows[:-2] == document["rows"]
    remainder, step = rows[-2:]
    assert remainder["kind"] == "unexplained" and remainder["delta_us"] == document["unexplained_us"]
    assert step["kind"] == "step"
    assert (step["a_us"], step["b_us"], step["delta_us"]) == (
        document["step_a_us"], document["step_b_us"], document["delta_us"])


# ---- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (("loading", "nosuch"), "no run named 'nosuch'"),
    (("nosuch", "loading"), "no run named 'nosuch'"),
    (("loading", None), "diff needs two runs"),
    (("loading", "no_loading", 3), "^path_diff: no rank 3 in runs loading, no_loading$"),
    (("loading", "even", 1), "^path_diff: no rank 1 in run loading$"),
])
def test_bad_input_is_one_clear_error(handmade, args, message):
    with pytest.raises(CtdaError, match=message):
        diff(handmade, *args)


def test_the_report_refuses_a_missing_run(handmade):
    with pytest.raises(CtdaError, match="path_diff needs run_a and run_b"):
        report_rows(handmade, "loading", None)


@pytest.mark.parametrize("params, message", [
    ((), "error: path_diff needs run_a and run_b"),
    (("-p", "run_a=x", "-p", "run_b=y"), "error: no run named 'x'; runs: only"),
    (("-p", "run_a=only", "-p", "run_b=only", "-p", "rank=2"), "error: path_diff: no rank 2 in run only"),
])
def test_the_report_on_the_command_line_refuses_in_one_line(run_cli, db_path, tmp_path, params, message):
    con = connect(db_path)
    ingest(con, [training_trace().write(tmp_path / "t.json")], run_name="only", show_progress=False)
    analyze(con, show_progress=False)
    con.close()
    result = run_cli("report", "path_diff", *params)
    assert result.code == 1 and result.err.strip() == message


def test_an_unanalysed_run_is_refused(tmp_path):
    con = connect(tmp_path / "w.duckdb")
    ingest(con, [training_trace().write(tmp_path / "a.json")], run_name="analysed", show_progress=False)
    analyze(con, show_progress=False)
    ingest(con, [training_trace(item_us=5).write(tmp_path / "b.json")], run_name="later", show_progress=False)
    with pytest.raises(CtdaError, match="^run 'later' has not been analysed"):
        diff(con, "analysed", "later")
    con.close()


# ---- recorded pairs --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    con = connect(tmp_path_factory.mktemp("recorded") / "w.duckdb")
    for name in ("stall20-r1", "stall0-r1", "compute200-r1", "compute100-r1",
                 "gpuloader15-r1", "gpuloader0-r1", "gpucopy1024-r1", "gpucopy512-r1"):
        ingest(con, [DATA / "whatif" / f"{name}.json.gz"], run_name=name, show_progress=False)
    for name in ("straggler", "balanced", "pipeline", "pipeline_slow"):
        ingest(con, sorted((DATA / "gloo" / name).glob("rank-*.json.gz")), run_name=name, show_progress=False)
    analyze(con, show_progress=False)
    yield con
    con.close()


def test_recorded_data_loading_removed_lands_on_data_loading(recorded):
    document = diff(recorded, "stall20-r1", "stall0-r1")
    assert_adds_up(document)
    assert document["delta_us"] < -15_000  # a 20 ms stall, removed for real
    assert share_on(document, "data_loading") >= 0.8
    assert document["rows"][0]["label"] == "data_loading"


@pytest.mark.parametrize("run", ["stall20-r1", "compute100-r1"])
def test_recorded_annotation_rows_are_the_path_time_inside_each_annotation(recorded, run):
    rows = {r["label"]: r["a_us"] for r in diff(recorded, run, run)["rows"] if r["kind"] == "annotation"}
    assert rows == {name: math.floor(us + 0.5) for name, us in annotation_time_by_hand(recorded, run).items()}


def test_recorded_half_the_compute_lands_on_compute(recorded):
    document = diff(recorded, "compute200-r1", "compute100-r1")
    assert_adds_up(document)
    assert document["delta_us"] < 0
    assert share_on(document, "compute") >= 0.8


def test_recorded_cuda_loader_stall_lands_on_the_wait_for_it(recorded):
    # CUDA, a DataLoader thread stalls 15 ms while the main thread waits for its batch
    document = diff(recorded, "gpuloader15-r1", "gpuloader0-r1")
    assert_adds_up(document)
    assert document["delta_us"] < -5000
    assert share_on(document, "loader_stall") >= 0.8
    assert document["rows"][0]["kind"] == "wait"


def test_recorded_cuda_copy_twice_as_fast_lands_on_the_copy_kernel(recorded):
    document = diff(recorded, "gpucopy1024-r1", "gpucopy512-r1")
    assert_adds_up(document)
    assert share_on(document, "Memcpy HtoD") >= 0.8
    assert document["rows"][0]["kind"] == "kernel"


def test_recorded_straggler_lands_on_rank_1_and_slow_rank(recorded):
    document = diff(recorded, "balanced", "straggler")
    assert_adds_up(document)
    assert document["delta_us"] > 10_000  # rank 1 sleeps 15 ms a step
    assert share_on(document, "slow_rank", "rank 1") >= 0.8
    assert document["rows"][0]["label"] == "rank 1: slow_rank"


@pytest.mark.parametrize("run_a, run_b, rank", [
    ("stall0-r1", "stall20-r1", None), ("compute100-r1", "compute200-r1", None),
    ("straggler", "balanced", None), ("balanced", "straggler", 0), ("balanced", "straggler", 1),
    ("pipeline", "pipeline_slow", None), ("pipeline_slow", "pipeline", 1), ("stall20-r1", "straggler", None),
])
def test_every_recorded_pair_adds_up_exactly(recorded, run_a, run_b, rank):
    document = diff(recorded, run_a, run_b, rank)
    assert_adds_up(document)
    assert document["rows"]
    measured = recorded.execute(
        "SELECT median(step_us) FROM (SELECT step, max(window_us) AS step_us FROM analysis_windows "
        "JOIN runs AS r USING (run_id) WHERE r.name = ? AND (? IS NULL OR rank = ?) GROUP BY step)",
        [run_b, rank, rank]).fetchone()[0]
    assert abs(document["step_b_us"] - measured) <= 0.5
