"""A wait for another thread is shortened once (issue 42, item 5): where the graph holds the
hand-off as an edge (the autograd thread hands back to the main thread), the replay moves the
waiting node with the producer through that edge and infers no wait beside it; where it holds
none (a loader thread's batch), the inferred wait ends where the thread runs again, at its
first op or runtime call, so the node's own work is not shrunk with the wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctda_sql.core.connection import connect
from ctda_sql.engine.analyze import analyze
from ctda_sql.ingest.load import ingest
from ctda_sql.testing.tracebuilder import TraceBuilder
from ctda_sql.whatif.replay import Scale, Scenario, whatif

ITEM_SYNC = Path(__file__).parents[1] / "data" / "cuda" / "item_sync.json.gz"


def backward_handoff_trace(folder: Path) -> Path:
    """Step 0-5000 µs. The main thread runs forward (aten::mm 100-1000); the autograd thread
    runs backward 1200-2500, 1000 µs of it `MmBackward0` (1300-2300); the main thread resumes
    100 µs after backward ends (the GIL's hand-off) with the optimizer: its annotation from
    2550, a `cudaStreamIsCapturing` 2600-2610, its first op `aten::add_` 3000-4000; then the
    step's 1000 µs tail."""
    b = TraceBuilder(rank=0, world_size=1)
    main, autograd = b.thread(100, "pt_main_thread"), b.thread(101, "pt_autograd_0")
    b.step(1, main, ts=0, dur=5000)
    b.cpu_op(main, "aten::mm", ts=100, dur=900)
    b.cpu_op(autograd, "autograd::engine::evaluate_function: MmBackward0", ts=1200, dur=1300)
    b.cpu_op(autograd, "MmBackward0", ts=1300, dur=1000)
    b.annotation(main, "Optimizer.step#SGD.step", ts=2550, dur=1450)
    b.runtime(main, "cudaStreamIsCapturing", ts=2600, dur=10)
    b.cpu_op(main, "aten::add_", ts=3000, dur=1000)
    return b.write(folder / "backward_handoff.json")


def loader_handoff_trace(folder: Path) -> Path:
    """Step 0-10000 µs. A loader thread stalls 0-5400 and copies the batch 5400-5500; the
    main thread runs aten::relu 100-400, then waits inside its `enumerate(DataLoader)`
    annotation (450-5600), resumes with a `cudaStreamIsCapturing` 5600-5610 and computes
    (aten::mm) 6000-9000; then the step's 1000 µs tail."""
    b = TraceBuilder(rank=0, world_size=1)
    main, loader = b.thread(100, "pt_main_thread"), b.thread(200, "loader")
    b.step(1, main, ts=0, dur=10000)
    b.annotation(loader, "loader_stall", ts=0, dur=5400)
    b.cpu_op(loader, "aten::copy_", ts=5400, dur=100)
    b.cpu_op(main, "aten::relu", ts=100, dur=300)
    b.annotation(main, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", ts=450, dur=5150)
    b.runtime(main, "cudaStreamIsCapturing", ts=5600, dur=10)
    b.cpu_op(main, "aten::mm", ts=6000, dur=3000)
    return b.write(folder / "loader_handoff.json")


@pytest.fixture(scope="module")
def handoffs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("handoffs")
    con = connect(folder / "handoffs.duckdb")
    ingest(con, [backward_handoff_trace(folder)], run_name="backward", show_progress=False)
    ingest(con, [loader_handoff_trace(folder)], run_name="loader", show_progress=False)
    ingest(con, [ITEM_SYNC], run_name="item_sync", show_progress=False)
    analyze(con, show_progress=False)
    yield con
    con.close()


def replay(con, run: str, *scales: Scale):
    return whatif(con, run=run, scenario=Scenario(scales=scales), persist=False)


def path_durations(result) -> dict[str, tuple[float, float]]:
    """label -> (measured, predicted) duration of each node on the replayed path."""
    return {label: (measured, predicted) for *_, label, measured, predicted, _rank, _step in result.path}


def test_the_unchanged_replay_is_the_measured_step(handoffs):
    assert [row[3:6] for row in replay(handoffs, "backward").steps] == [(5000.0, 5000.0, 5000.0)]
    assert [row[3:6] for row in replay(handoffs, "loader").steps] == [(10000.0, 10000.0, 10000.0)]


@pytest.mark.parametrize("factor, step_us", [(0.0, 4000.0), (0.5, 4500.0), (2.0, 6000.0)])
def test_removing_backward_work_saves_that_work_once(handoffs, factor, step_us):
    # By hand: backward runs 1200-(1500 + 1000 f); the main thread resumes 100 µs later (the
    # hand-off) and runs its node as measured (400 µs to its first op, 1000 µs of add_), then
    # the 1000 µs tail: the step is 4000 + 1000 f, the saving (1 - f) x MmBackward0's 1000 µs.
    # Before, the main thread's idle gap (1000-3000, to its first op) also shrank at the rate
    # the autograd thread lost time, 0.5 at f = 0: the node's 400 µs before add_ and the
    # 100 µs hand-off lost 250 µs more (3750 µs at f = 0, 4375 at f = 0.5)
    result = replay(handoffs, "backward", Scale("MmBackward0", factor))
    assert [row[3:6] for row in result.steps] == [(5000.0, 5000.0, step_us)]
    # the main thread's node after the hand-off keeps its measured 1400 µs
    assert path_durations(result)["cudaStreamIsCapturing"] == (1400.0, 1400.0)


def test_a_hand_off_the_graph_holds_as_an_edge_is_no_inferred_wait(handoffs):
    replay(handoffs, "backward", Scale("MmBackward0", 0.0))
    assert handoffs.execute("SELECT count(*) FROM wi_inferred_waits").fetchone()[0] == 0


@pytest.mark.parametrize("factor, step_us", [(0.0, 4800.0), (0.5, 7300.0)])
def test_a_wait_for_a_loader_ends_where_the_thread_runs_again(handoffs, factor, step_us):
    # The loader thread has no edge into the main thread: the wait is inferred, from relu's
    # end (400) to the runtime call that resumes the thread (5600); the annotation the wait
    # lies in does not end it (a 50 µs gap would be no wait). By hand: at f = 0.5 the batch
    # is ready 2700 µs sooner, the thread resumes at 2900 and runs its 400 µs up to mm and
    # mm as measured, then the tail: 7300 µs. At f = 0 the batch is ready before relu ends:
    # the whole 5200 µs wait goes, the thread runs on at 400: 4800 µs. Before, the wait ran
    # to the first op (6000), and the 5400 µs stall removed at f = 0 took 200 µs of the
    # node's own work before mm with it: 4600 µs
    result = replay(handoffs, "loader", Scale("loader_stall", factor))
    assert [row[3:6] for row in result.steps] == [(10000.0, 10000.0, step_us)]
    waits = handoffs.execute("SELECT from_us, to_us, producer_end_us FROM wi_inferred_waits").fetchall()
    assert waits == [(400.0, 5600.0, 5500.0)]


def test_removing_autograd_ops_of_a_recorded_step_saves_their_time(handoffs):
    # item_sync: every AddmmBackward0 runs on the autograd thread on the path, and the main
    # thread waits for backward to end (a cross_thread edge). At zero each step saves their
    # time: 0.861, 0.894, 0.953, 0.865 ms; before, 0.14 ms more a step (16%), as the main
    # thread's gap to its first op (past the runtime call its node begins with) shrank too
    removed = dict(handoffs.execute("""
        SELECT w.step, sum(e.dur_us) FROM events AS e
        JOIN runs AS r USING (run_id)
        JOIN analysis_windows AS w ON w.run_id = e.run_id AND w.rank = e.rank
         AND e.ts_us >= w.start_us AND e.ts_us < w.end_us
        WHERE r.name = 'item_sync' AND e.name = 'AddmmBackward0' GROUP BY w.step""").fetchall())
    steps = replay(handoffs, "item_sync", Scale("AddmmBackward0", 0.0)).steps
    savings = {step: replay_us - predicted_us for _run, _rank, step, _m, replay_us, predicted_us, *_ in steps}
    assert savings.keys() == removed.keys() and len(savings) == 4
    for step, saving in savings.items():
        assert saving == pytest.approx(removed[step], abs=0.01), step
