"""Property tests of the what-if replay on generated two-thread, two-stream training steps
(test_engine_properties.StepSimulator), on steps fed by a loader thread (inferred waits,
from a step's start and across steps) and on ranks coupled by all-reduces: the unchanged
replay reproduces every measured step, and a change that only removes work never predicts
a negative step nor lengthens the run (the replay is a max-plus system: shorter durations
cannot end anything later)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctda_sql.testing.tracebuilder import TraceBuilder
from ctda_sql.whatif.replay import Scale, Scenario, whatif

from engine_helpers import analyzed
from helpers.properties import OP_NAMES, StepSimulator, action
from invariants import broken_invariants

shrink = st.builds(Scale, st.sampled_from(OP_NAMES + ("kernel_*", "*", "Memcpy*", "cudaDeviceSynchronize")),
                   st.sampled_from([0.0, 0.5, 0.9]))


def check_replay(builder, scales: list[Scale]) -> None:
    """The unchanged replay is every measured step; the change predicts no negative step and
    no longer run."""
    with tempfile.TemporaryDirectory() as folder:
        con = analyzed(builder, Path(folder))
        try:
            unchanged = whatif(con, persist=False).steps
            assert all(abs(row[5] - row[3]) <= 1e-6 * max(row[3], 1.0) for row in unchanged), unchanged
            changed = whatif(con, scenario=Scenario(scales=tuple(scales)), persist=False).steps
            assert all(row[5] >= 0 for row in changed), changed
            assert sum(row[5] for row in changed) <= sum(row[3] for row in changed) * (1 + 1e-9) + 1e-6, changed
        finally:
            con.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=1, max_size=12), st.sampled_from([0, 0, 40]), st.lists(shrink, min_size=1, max_size=2))
def test_replay_reproduces_each_step_and_removing_work_never_lengthens_the_run(actions, in_flight_us, scales):
    check_replay(StepSimulator(in_flight_us).run(actions), scales)


loader_step = st.fixed_dictionaries({
    "stall_us": st.sampled_from([0, 300, 2000, 6000]),
    "make_us": st.integers(50, 1500),
    "handoff_us": st.sampled_from([20, 150, 2500]),
    "ops_us": st.lists(st.integers(20, 1500), min_size=1, max_size=3),
    "kernel_us": st.sampled_from([None, 200, 3000]),
    "data_loading_us": st.sampled_from([0, 0, 800]),
})


def loader_steps(steps: list[dict]):
    """A main thread that begins each step by taking a batch from a loader thread (stall, then
    make the batch, then the next), runs its ops (the first may launch a kernel on stream 7),
    then may stall in data_loading."""
    builder = TraceBuilder(rank=0, world_size=1)
    main, loader = builder.thread(100, "pt_main_thread"), builder.thread(200, "loader")
    loader_clock, clock, stream_free = 0.0, 0.0, 0.0
    for number, step in enumerate(steps, start=1):
        if step["stall_us"]:
            builder.annotation(loader, "loader_stall", ts=loader_clock, dur=step["stall_us"])
        builder.cpu_op(loader, "aten::copy_", ts=loader_clock + step["stall_us"], dur=step["make_us"])
        ready = loader_clock + step["stall_us"] + step["make_us"]
        loader_clock = ready + 10
        start, at = clock, max(clock + 5, ready + step["handoff_us"])
        for index, op_us in enumerate(step["ops_us"]):
            builder.cpu_op(main, "aten::mm", ts=at, dur=op_us)
            if index == 0 and step["kernel_us"]:
                kernel_ts = max(at + 5, stream_free)
                builder.launch(main, ts=at + 1, dur=2, kernel="gemm_kernel", stream=7, kernel_ts=kernel_ts,
                               kernel_dur=step["kernel_us"])
                stream_free = kernel_ts + step["kernel_us"]
            at += op_us + 10
        if step["data_loading_us"]:
            builder.annotation(main, "data_loading", ts=at, dur=step["data_loading_us"])
            at += step["data_loading_us"]
        clock = at + 5
        builder.step(number, main, ts=start, dur=clock - start)
    return builder


loader_change = st.sampled_from([Scale("loader_stall", 0.0), Scale("loader_stall", 0.5), Scale("data_loading", 0.5),
                                 Scale("aten::mm", 0.5), Scale("aten::copy_", 0.0), Scale("*", 0.5, "kernel")])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(loader_step, min_size=1, max_size=4), st.lists(loader_change, min_size=1, max_size=2))
def test_inferred_waits_keep_the_replay_exact_and_never_lengthen_the_run(steps, scales):
    check_replay(loader_steps(steps), scales)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 4), st.integers(1, 3), st.data())
def test_coupled_ranks_replay_exactly_and_removing_work_never_lengthens_a_rank(world, steps, data):
    # test_crossrank.job: steps of compute, an all-reduce that waits for the late rank, an
    # update; clocks may be offset. The ranks are replayed together (matched collectives)
    from collections import defaultdict

    from helpers.db import analysed_db
    from helpers.jobs import job

    late = data.draw(st.dictionaries(st.integers(1, steps), st.integers(0, world - 1)))
    offsets = data.draw(st.dictionaries(st.integers(0, world - 1), st.sampled_from([-3000.0, 40.0, 9000.0])))
    ranks = data.draw(st.lists(st.integers(0, world - 1), min_size=1, max_size=world, unique=True))
    scale = Scale("aten::mm", data.draw(st.sampled_from([0.0, 0.3, 0.9])), None, tuple(sorted(ranks)))
    with tempfile.TemporaryDirectory() as folder:
        con = analysed_db(Path(folder) / "job.duckdb", {"job": [job(Path(folder) / "job", world, steps, late, offsets)]})
        try:
            assert broken_invariants(con) == {}  # the engine's, cross_rank paths included
            unchanged = whatif(con, persist=False).steps
            assert {row[1] for row in unchanged} == set(range(world))
            assert [row for row in unchanged if abs(row[5] - row[3]) > 1e-6 * row[3]] == []
            changed = whatif(con, scenario=Scenario(scales=(scale,)), persist=False).steps
            assert all(row[5] >= 0 for row in changed), changed
            totals = defaultdict(lambda: [0.0, 0.0])
            for row in changed:
                totals[row[1]][0] += row[3]
                totals[row[1]][1] += row[5]
            assert all(predicted <= measured + 1e-6 for measured, predicted in totals.values()), changed
        finally:
            con.close()
