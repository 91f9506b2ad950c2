"""The coupled replay in one ordered pass (warehouse/whatif/ordered.py, issue 32).

A change that moves a chain of K collectives made the repeated passes (Coupling.solve,
StreamCarry.settle) take K rounds over every node: 297 CPU s for 32k events of gloo
all-reduces. After a few rounds the replay now solves the same equations in one pass in
topological order. Checked here: it finds the repeated passes' answer on real and hand-made
runs, under compute, network and cluster changes; its answer satisfies every equation of the
model; its number of passes does not grow with the chain; and a gloo run of many steps over
a slow shared link, which the repeated passes never settled, is replayed."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

from ctda_sql.testing.tracebuilder import TraceBuilder
from ctda_sql.whatif import graph, replay
from ctda_sql.whatif.changes import Scale, Scenario
from ctda_sql.whatif.cluster import whatif_cluster
from ctda_sql.whatif.cluster_file import check_cluster
from ctda_sql.whatif.ordered import levels

from helpers.db import analysed_db
from helpers.jobs import GLOO, gloo_chain, job, shared_link

DATA = Path(__file__).parents[1] / "data"
SCENARIOS = {
    "updates_halved": Scenario(scales=(Scale("aten::add_", 0.5),)),
    "rank0_compute_doubled": Scenario(scales=(Scale("*", 2.0, None, (0,)),)),
    "quarter_bandwidth": Scenario(bandwidth_scale=0.25),
}
LINK_MBIT = {"shared_link_400m": 400, "shared_link_5m": 5}
RUNS = ("gloo_chain", "late", "straggler", "shaped", "pipeline_nccl", "fsdp", "ddp_nccl")
SINGLE_RANK = ("ddp_nccl",)
# the unchanged replay (it settles in a pass or two) and the change's first pass, besides its rounds
FEW_PASSES = 3


@pytest.fixture(scope="module")
def runs_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("ordered")
    con = analysed_db(root / "w.duckdb", {
        "gloo_chain": [gloo_chain(root / "chain", 40)],
        "late": [job(root / "late", world=4, steps=12, late={s: s % 4 for s in range(1, 13)})],
        "straggler": [GLOO / "straggler"],
        "shaped": [DATA / "shaped" / "r2-400m-1"],
        "pipeline_nccl": [DATA / "cuda" / "parallel" / "pipeline_nccl"],
        "fsdp": [DATA / "cuda" / "parallel" / "fsdp"],
        "ddp_nccl": [DATA / "cuda" / "ddp_nccl.json.gz"],
    })
    yield con
    con.close()


class Replays:
    """Every replay's node starts and path sources (replay._finish's inputs), per solve."""

    def __init__(self, monkeypatch):
        self.monkeypatch, self.seen = monkeypatch, []
        finish = replay._finish

        def capture(graph_, windows, nodes, start, source):
            self.seen.append((start.copy(), source.copy()))
            return finish(graph_, windows, nodes, start, source)
        monkeypatch.setattr(replay, "_finish", capture)

    def run(self, con, run: str, change: str, ordered: bool):
        """The change's replay with the ordered pass after the first rounds, or rounds only."""
        fast = 0 if ordered else 10**9
        self.monkeypatch.setattr(graph.Coupling, "FAST_ROUNDS", fast)
        self.monkeypatch.setattr(graph.StreamCarry, "FAST_ROUNDS", fast)
        self.seen.clear()
        if change in LINK_MBIT:
            spec = check_cluster(shared_link(4, LINK_MBIT[change]))
            steps = whatif_cluster(con, spec, run=run, name=f"{change} {ordered}")[0]
        else:
            steps = replay.whatif(con, run=run, scenario=SCENARIOS[change], persist=False)
        return list(self.seen), steps


def cases():
    for run in RUNS:
        for change in (*SCENARIOS, *([] if run in SINGLE_RANK else LINK_MBIT)):
            yield run, change


@pytest.mark.parametrize("run,change", list(cases()))
def test_the_ordered_pass_finds_the_repeated_passes_answer(runs_db, monkeypatch, run, change):
    replays = Replays(monkeypatch)
    rounds, rounds_steps = replays.run(runs_db, run, change, ordered=False)
    ordered, ordered_steps = replays.run(runs_db, run, change, ordered=True)
    assert len(rounds) == len(ordered) > 0
    for (start, source), (ordered_start, ordered_source) in zip(rounds, ordered):
        assert np.array_equal(np.isfinite(start), np.isfinite(ordered_start))
        finite = np.isfinite(start)
        assert np.allclose(ordered_start[finite], start[finite], rtol=0, atol=1e-6)
        assert np.array_equal(ordered_source, source)
    # the steps' rows are rounded to ns: a last-bit difference may round the other way
    predicted = replay.STEP_COLUMNS.index("predicted_us")
    assert [r[predicted] for r in ordered_steps.steps] == pytest.approx(
        [r[predicted] for r in rounds_steps.steps], abs=1.001e-3)


def residual(coupling, carry, start) -> float:
    """How far one more round of the repeated passes moves a solved replay's nodes and origins."""
    origin, floor = coupling.next_floors(start)
    g = coupling.graph
    carry_floor, initial = carry.bounds(start + g.duration, origin) if carry is not None else (None, None)
    again = g.forward_pass(floor if carry_floor is None else np.maximum(floor, carry_floor), initial)
    moved = np.abs(np.where(np.isfinite(start), again - start, 0.0)).max(initial=0.0)
    return max(float(moved), float(np.abs(origin - coupling.origin).max(initial=0.0)))


def test_many_steps_of_gloo_calls_over_a_slow_shared_link_settle(tmp_path, monkeypatch):
    """25 steps of 8 calls each: the repeated passes alternated between two answers here and
    raised "did not settle"; the ordered pass's answer is a fixed point of every equation."""
    con = analysed_db(tmp_path / "w.duckdb", {"steps": [gloo_chain(tmp_path / "steps", 200, calls_per_step=8)]})
    solved = []
    solve = graph.Coupling.solve

    def checked(self, carry=None):
        start = solve(self, carry)
        solved.append(residual(self, carry, start))
        return start
    monkeypatch.setattr(graph.Coupling, "solve", checked)
    result, _ = whatif_cluster(con, check_cluster(shared_link(4, 400)), name="slow link")
    assert solved and max(solved) < 1e-6
    steps = [dict(zip(replay.STEP_COLUMNS, row)) for row in result.steps]
    assert sorted((s["rank"], s["step"]) for s in steps) == [(r, s) for r in (0, 1) for s in range(1, 26)]
    # 4 KiB per call over 0.4 Gbit/s: each transfer is slower than the measured 12 us
    assert all(s["predicted_us"] > s["measured_us"] for s in steps)


def forward_passes(monkeypatch) -> list:
    """A list that gets an item for every forward pass of a replay from now on."""
    passes = []
    forward = graph.Graph.forward_pass

    def counted(self, *args, **kwargs):
        passes.append(1)
        return forward(self, *args, **kwargs)
    monkeypatch.setattr(graph.Graph, "forward_pass", counted)
    return passes


@pytest.mark.parametrize("calls", [20, 200])
def test_the_replay_passes_do_not_grow_with_the_chain(tmp_path, monkeypatch, calls):
    """A change that moves every call of a chain: the forward passes stay a fixed few."""
    con = analysed_db(tmp_path / "w.duckdb", {"chain": [gloo_chain(tmp_path / "chain", calls)]})
    passes = forward_passes(monkeypatch)
    replay.whatif(con, scenario=SCENARIOS["updates_halved"], persist=False)
    assert len(passes) <= FEW_PASSES + graph.Coupling.FAST_ROUNDS


def stream_steps(path: Path, steps: int) -> Path:
    """One rank, `steps` steps of 100 us: 40 us of data loading, then 4 kernels of 20 us on one
    stream that run on past the step's end (the next step's carry-in)."""
    b = TraceBuilder()
    main = b.thread(100, "pt_main_thread")
    b.stream(7)
    for step in range(steps):
        t0 = step * 100
        b.step(step + 1, main, ts=t0, dur=100)
        b.cpu_op(main, "dataload", ts=t0 + 1, dur=40)
        for k in range(4):
            b.launch(main, ts=t0 + 45 + k * 10, dur=3, kernel="gemm", stream=7, kernel_ts=t0 + 50 + k * 20,
                     kernel_dur=20)
    return b.write(path)


def test_a_ranks_gpu_stream_carried_across_many_steps_takes_a_few_passes(tmp_path, monkeypatch):
    """Without data loading each step's kernels queue behind the earlier steps' on the stream:
    a round settled one step more (400 passes here); the ordered pass gives the same answer."""
    con = analysed_db(tmp_path / "w.duckdb", {"steps": [stream_steps(tmp_path / "t.json", 400)]})
    passes = forward_passes(monkeypatch)
    no_loading = Scenario(scales=(Scale("dataload", 0.0),))
    ordered = replay.whatif(con, scenario=no_loading, persist=False)
    assert len(passes) <= FEW_PASSES + graph.StreamCarry.FAST_ROUNDS
    monkeypatch.setattr(graph.StreamCarry, "FAST_ROUNDS", 10**9)
    rounds = replay.whatif(con, scenario=no_loading, persist=False)
    predicted = replay.STEP_COLUMNS.index("predicted_us")
    assert [r[predicted] for r in ordered.steps] == pytest.approx([r[predicted] for r in rounds.steps], abs=1.001e-3)
    # nothing syncs: each step takes the CPU's 100 - 40 us while its stream queues on behind
    assert statistics.median(r[predicted] for r in ordered.steps) == pytest.approx(60, abs=1)


def test_a_graph_with_a_cycle_keeps_the_rounds(runs_db, monkeypatch):
    """An inconsistent matching could make the graph cyclic: then no ordered pass, and the
    rounds go on to their answer (here the same as the ordered pass's)."""
    import ctda_sql.whatif.ordered as ordered

    replays = Replays(monkeypatch)
    expected, _ = replays.run(runs_db, "gloo_chain", "updates_halved", ordered=True)
    monkeypatch.setattr(ordered, "levels", lambda *args: None)
    monkeypatch.setattr(graph.Coupling, "FAST_ROUNDS", 0)
    replays.seen.clear()
    replay.whatif(runs_db, run="gloo_chain", scenario=SCENARIOS["updates_halved"], persist=False)
    assert len(replays.seen) == len(expected) > 0
    for (start, _), (fallback, _) in zip(expected, replays.seen):
        assert np.allclose(fallback[np.isfinite(start)], start[np.isfinite(start)], rtol=0, atol=1e-6)


def test_levels_order_a_dag_and_find_a_cycle():
    src, dst = np.array([0, 0, 1, 2, 3]), np.array([1, 2, 3, 3, 4])
    assert levels(5, src, dst).tolist() == [0, 1, 1, 2, 3]
    assert levels(3, np.array([0, 1, 2]), np.array([1, 2, 1])) is None


@pytest.mark.parametrize("seed", range(5))
def test_levels_are_the_longest_chains_into_each_vertex(seed):
    """Wide levels (numpy) and narrow ones (walked in Python) against a direct longest path."""
    rng = np.random.default_rng(seed)
    vertices = 400
    src = rng.integers(0, vertices - 1, 1500)
    dst = src + 1 + rng.integers(0, np.minimum(vertices - 1 - src, 1 + 60 * (seed % 2)))
    longest = np.zeros(vertices, dtype=np.int64)
    for s, d in sorted(zip(src.tolist(), dst.tolist())):
        longest[d] = max(longest[d], longest[s] + 1)
    assert levels(vertices, src, dst).tolist() == longest.tolist()
