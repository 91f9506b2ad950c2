"""A kernel carried across a step boundary and scaled by --scale is counted once (issue 42, item 5).

A kernel in flight at a step boundary is part of a node of the window that launched it and of
the next window's carry-in node on its stream. The replay scales it where it was launched; the
carry-in node follows the replayed end of that work (warehouse/whatif/graph.py, StreamCarry).
It used to be scaled a second time there: its start followed the earlier work's new end while
its own duration was scaled too, so the part of the kernel after the boundary was saved twice.
Now the carry-in node ends where the earlier work ends in the replay, its scaled duration
before that end (docs/method.md, "A kernel carried across steps")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ctda_sql.testing.tracebuilder import TraceBuilder
from ctda_sql.whatif import graph, replay
from ctda_sql.whatif.replay import STEP_COLUMNS, Scale, Scenario, whatif

from helpers.db import analysed_db

KERNEL = "long_kernel"
DATA = Path(__file__).parents[1] / "data"
SEND_RECV = "ncclDevKernel_SendRecv*"


def carried_kernel_trace(path: Path, steps: int = 4) -> Path:
    """Each step of one thread and one stream (r: where the step's sync returns, 10 in step 1):
      cudaDeviceSynchronize from the step's start + 5 to r, waiting for the earlier step's kernels;
      aten::mm r+5 .. r+305, launching long_kernel (r+20 .. r+1020 on stream 7) and next_kernel
      (queued behind it, r+1020 .. r+2020); aten::relu r+305 .. r+805, where the next step starts.
    The next step's sync returns at r+2025: every step but the first and last lasts 2,025 us, the
    first 815 us. long_kernel runs 215 us into the next step and next_kernel 1,000 us after that:
    both are that step's carry-in node, and nothing else on the GPU hides them."""
    b = TraceBuilder(rank=0, world_size=1)
    main = b.thread(100, "pt_main_thread")
    b.stream(7)
    start, ret = 0.0, 10.0
    for n in range(1, steps + 1):
        following = ret + 805
        b.step(n, main, ts=start, dur=following - start)
        b.runtime(main, "cudaDeviceSynchronize", ts=start + 5, dur=ret - (start + 5))
        b.cpu_op(main, "aten::mm", ts=ret + 5, dur=300)
        b.launch(main, ts=ret + 10, dur=5, kernel=KERNEL, stream=7, kernel_ts=ret + 20, kernel_dur=1000)
        b.launch(main, ts=ret + 20, dur=5, kernel="next_kernel", stream=7, kernel_ts=ret + 1020, kernel_dur=1000)
        b.cpu_op(main, "aten::relu", ts=ret + 305, dur=500)
        start, ret = following, ret + 2025
    return b.write(path)


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    folder = tmp_path_factory.mktemp("carried")
    con = analysed_db(folder / "w.duckdb", {"carried": [carried_kernel_trace(folder / "t.json")]})
    yield con
    con.close()


def predicted(con, factor: float | None, **kwargs) -> dict[int, float]:
    """step -> predicted_us with long_kernel scaled by `factor` (None: unchanged)."""
    scenario = Scenario(scales=(Scale(KERNEL, factor),)) if factor is not None else Scenario()
    result = whatif(con, scenario=scenario, persist=False, **kwargs)
    return {row[STEP_COLUMNS.index("step")]: row[STEP_COLUMNS.index("predicted_us")] for row in result.steps}


def test_the_unchanged_replay_is_the_measured_steps(con):
    result = whatif(con, persist=False)
    steps = [dict(zip(STEP_COLUMNS, row)) for row in result.steps]
    assert [s["measured_us"] for s in steps] == [815, 2025, 2025, 3240]
    assert all(s["predicted_us"] == pytest.approx(s["measured_us"], abs=1e-6) for s in steps)
    assert all(s["replay_us"] == pytest.approx(s["measured_us"], abs=1e-6) for s in steps)


# By hand, with long_kernel scaled by f (its 1,000 us become 1,000 f): step 1's CPU side is
# unchanged (815 us); its kernels run 30 .. 30+1,000f and on to 1,030+1,000f. Step 2 starts at
# 815; its sync returns 5 us after they end, at 1,035+1,000f, and its CPU work runs 805 us on:
# step 2 lasts 1,035+1,000f+805-815 = 1,025+1,000f. Step 3 the same (its sync waits for step 2's
# kernels, launched 20 us after step 2's sync returned). Step 4, the last, runs on to its own
# kernels' end: its sync returns 220+1,000f us after its start, and next_kernel ends
# 20+1,000f+1,000 us after that: 1,240+2,000f.
# Before the fix the carry-in node of step 2 ended (1-f) x 215 us (long_kernel's part after the
# boundary) before the work it continues: at f=0 step 2 took 810 us (its sync did not wait at all),
# step 3 1,000 and step 4 1,405; at f=0.5 1,417.5, 1,500 and 2,297.5; at f=2 3,240, 3,240, 5,455.
@pytest.mark.parametrize("factor,hand", [
    (0.0, {2: 1025.0, 3: 1025.0, 4: 1240.0}),     # saving 1,000 us a middle step (the replay said 1,215)
    (0.5, {2: 1525.0, 3: 1525.0, 4: 2240.0}),     # saving 500 us (the replay said 607.5)
    (2.0, {2: 3025.0, 3: 3025.0, 4: 5240.0}),     # 1,000 us slower (the replay said 1,215)
])
def test_a_carried_kernel_is_scaled_once(con, factor, hand):
    steps = predicted(con, factor)
    assert steps[1] == pytest.approx(815, abs=1e-6)  # the first step's CPU side does not wait for its kernels
    assert {step: steps[step] for step in hand} == pytest.approx(hand, abs=1e-6)


def test_the_carry_in_node_keeps_its_scaled_duration_up_to_the_earlier_works_end(con):
    """On step 2's replayed path the carry-in node (long_kernel then next_kernel, 2,000 us
    measured) lasts what that work lasts with long_kernel at zero, 1,000 us (next_kernel), and
    the sync waits for it."""
    result = whatif(con, scenario=Scenario(scales=(Scale(KERNEL, 0.0),)), persist=False)
    path = [row for row in result.path if row[2] == 2]
    assert [(row[5], row[6]) for row in path] == [
        ("gpu", KERNEL), ("cpu", "after cudaDeviceSynchronize"), ("cpu", "aten::mm")]
    assert path[0][7] == pytest.approx(2000) and path[0][8] == pytest.approx(1000)


def test_a_rank_replayed_from_a_later_step_scales_its_carry_in_there(con):
    """With --step 2 alone, the kernels in flight at its start were launched before the replay:
    they are scaled in the carry-in node only. By hand: long_kernel had 215 us left at step 2's
    start; at zero, next_kernel runs from the start (815) to 1,815, the sync returns at 1,820 and
    the step ends 805 us later: 1,810 us, 215 us saved (the part of the kernel in the step)."""
    assert predicted(con, 0.0, step=2) == {2: pytest.approx(1810, abs=1e-6)}


@pytest.mark.parametrize("factor", [0.0, 0.5, 2.0])
def test_the_ordered_pass_agrees_with_the_rounds(con, monkeypatch, factor):
    monkeypatch.setattr(graph.StreamCarry, "FAST_ROUNDS", 0)   # the ordered pass at once
    ordered = predicted(con, factor)
    monkeypatch.setattr(graph.StreamCarry, "FAST_ROUNDS", 10**9)  # rounds only
    rounds = predicted(con, factor)
    assert ordered == pytest.approx(rounds, abs=1e-6)


def solved_carry(monkeypatch) -> list[dict]:
    """A list that gets, for every replay from now on, its StreamCarry and solved node starts."""
    seen: list[dict] = []
    build, finish = graph.StreamCarry.build.__func__, replay._finish

    def recording(cls, graph_, nodes, chain):
        seen.append({"carry": build(cls, graph_, nodes, chain)})
        return seen[-1]["carry"]

    def finishing(graph_, windows, nodes, start, source):
        seen[-1]["start"] = start.copy()
        return finish(graph_, windows, nodes, start, source)
    monkeypatch.setattr(graph.StreamCarry, "build", classmethod(recording))
    monkeypatch.setattr(replay, "_finish", finishing)
    return seen


def assert_carry_ends_with_the_earlier_work(replayed: dict) -> int:
    """Every later window's carry-in node that ends its stream's measured earlier work ends,
    replayed, where the rank's earlier windows' work on that stream ends in the same replay.
    Returns how many such nodes there are."""
    carry, start = replayed["carry"], replayed["start"]
    g, chain = carry.graph, carry.chain
    origin = chain.origins(g.window_lengths(start))
    before = carry._ends_before(start + g.duration, origin)
    window, stream, rows = carry.carry_window, carry.carry_stream, carry.carry_rows
    last = np.isclose(chain.origin0[window] + g.measured_end[rows], carry.measured_before[window, stream],
                      rtol=0, atol=1e-6)
    replayed_end = origin[window] + start[rows] + g.duration[rows]
    assert np.allclose(replayed_end[last], before[window, stream][last], rtol=0, atol=1e-6)
    return int(last.sum())


@pytest.mark.parametrize("factor", [0.0, 0.5, 2.0])
def test_the_hand_made_carry_in_ends_with_the_work_it_continues(con, monkeypatch, factor):
    seen = solved_carry(monkeypatch)
    predicted(con, factor)
    assert assert_carry_ends_with_the_earlier_work(seen[-1]) == 3   # steps 2, 3 and 4


@pytest.fixture(scope="module")
def pipeline_nccl(tmp_path_factory):
    """2 pipeline stages exchanging activations by NCCL send/recv: a later step's carry-in holds
    the earlier step's transfers still running (24 carry-in nodes after the first windows)."""
    folder = tmp_path_factory.mktemp("pipeline_nccl")
    con = analysed_db(folder / "w.duckdb", {"p": [DATA / "cuda" / "parallel" / "pipeline_nccl"]})
    yield con
    con.close()


def test_a_recorded_pipelines_carried_transfers_are_slowed_once(pipeline_nccl, monkeypatch):
    """The send/recv kernels twice as slow. Before the fix two carry-in nodes ended 9.5 and
    14.6 ms after the transfers they continue (their doubled time counted again), and rank 0's
    step 4 took 55.06 ms (measured 40.24); now they end with them and the step takes 41.02 ms.
    Coupled ranks, the ordered pass included."""
    seen = solved_carry(monkeypatch)
    result = whatif(pipeline_nccl, scenario=Scenario(scales=(Scale(SEND_RECV, 2.0),)), persist=False)
    assert assert_carry_ends_with_the_earlier_work(seen[-1]) > 0
    steps = {(row[1], row[2]): dict(zip(STEP_COLUMNS, row)) for row in result.steps}
    assert steps[(0, 4)]["measured_us"] == pytest.approx(40_244.4, abs=0.1)
    assert steps[(0, 4)]["predicted_us"] == pytest.approx(41_018.2, abs=0.1)


def test_a_shared_traces_carry_in_ends_with_the_work_it_continues(shared_traces, tmp_path, monkeypatch):
    """ns_resolution: its sgemm kernels twice as slow. Before the fix step 105 took 195.00 ms
    (measured 184.94): the carry-in's doubled kernel time counted twice; now 189.84 ms."""
    con = analysed_db(tmp_path / "w.duckdb", {"ns": [shared_traces / "ns_resolution.json.gz"]})
    seen = solved_carry(monkeypatch)
    result = whatif(con, scenario=Scenario(scales=(Scale("volta_sgemm_64x64_nn", 2.0),)), persist=False)
    assert assert_carry_ends_with_the_earlier_work(seen[-1]) > 0
    step = {row[2]: dict(zip(STEP_COLUMNS, row)) for row in result.steps}[105]
    assert step["measured_us"] == pytest.approx(184_937.3, abs=0.1)
    assert step["predicted_us"] == pytest.approx(189_843.8, abs=0.1)
    con.close()
