"""Hand-made traces for the fidelity rules (issue 11), each with an answer derived by hand:
blocking copies and syncs, NCCL hand-offs without cuda_sync events, steps that partition the
timeline, work in flight before profiling, every accelerator, CUDA graphs."""

from __future__ import annotations

import pytest

from ctda_sql.engine.analyze import AnalysisSettings
from ctda_sql.testing.tracebuilder import TraceBuilder

from engine_helpers import analyzed, cpcr, path_event_names, path_labels, remainder
from invariants import broken_invariants


def counted_by_step(con, method: str = "ctda") -> dict[int, float]:
    return dict(con.execute(
        "SELECT step, sum(counted_us) FROM critical_path WHERE method = ? GROUP BY step", [method]).fetchall())


# ---- blocking device-to-host copies ----------------------------------------------------

def item_after_long_kernel(work_after: bool) -> TraceBuilder:
    """A 15 ms kernel, then `loss.item()`: aten::item -> _local_scalar_dense -> a
    cudaMemcpyAsync into pageable memory that blocks until the kernel and the copy are done,
    then a short cudaStreamSynchronize. Optionally CPU work after it in the same step."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 15_600 if work_after else 15_200)
    b.cpu_op(main, "aten::linear", 10, 50)
    b.launch(main, 20, 10, "long_gemm", stream=7, kernel_ts=40, kernel_dur=15_000)
    b.cpu_op(main, "aten::item", 100, 15_000)
    b.cpu_op(main, "aten::_local_scalar_dense", 101, 14_998)
    b.launch(main, 105, 14_945, "Memcpy DtoH (Device -> Pageable)", stream=7, kernel_ts=15_042,
             kernel_dur=3, cat="gpu_memcpy", call="cudaMemcpyAsync")
    b.runtime(main, "cudaStreamSynchronize", 15_055, 5)
    if work_after:
        b.cpu_op(main, "aten::add", 15_200, 300)
    return b


@pytest.mark.parametrize("work_after", [True, False], ids=["work after the copy", "copy ends the step"])
def test_a_blocking_copy_puts_the_kernel_it_waited_for_on_the_path(tmp_path, work_after):
    con = analyzed(item_after_long_kernel(work_after), tmp_path)
    counted = path_event_names(con, "ctda")
    # the kernel carries the wait; the copy call contributes its launch cost at most
    assert counted["long_gemm"] == pytest.approx(15_000)
    assert counted.get("cudaMemcpyAsync", 0) < 1_000
    assert counted.get("cudaStreamSynchronize", 0) < 10
    assert "Memcpy DtoH (Device -> Pageable)" in counted
    if work_after:
        assert counted["aten::add"] == pytest.approx(300)
    assert broken_invariants(con) == {}


def test_the_copy_gets_a_sync_edge_into_the_node_after_the_wait(tmp_path):
    con = analyzed(item_after_long_kernel(True), tmp_path)
    label, kind = con.execute(
        "SELECT d.label, s.kind FROM edges e "
        "JOIN nodes d ON d.run_id = e.run_id AND d.step = e.step AND d.method = e.method AND d.node_id = e.dst "
        "JOIN nodes s ON s.run_id = e.run_id AND s.step = e.step AND s.method = e.method AND s.node_id = e.src "
        "WHERE e.method = 'ctda' AND e.type = 'sync'").fetchone()
    assert (label, kind) == ("after cudaMemcpyAsync", "gpu")


def test_several_syncs_in_one_op_each_wait_for_their_own_work(tmp_path):
    """One op waits twice: first for kernel A (stream 7), later for kernel B (stream 20),
    which it launched in between; both kernels are on the path, no wait counts as CPU work."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 3_000)
    b.cpu_op(main, "aten::prepare", 0, 20)
    b.launch(main, 5, 5, "kernel_a", stream=7, kernel_ts=15, kernel_dur=1_000)
    b.cpu_op(main, "my_op_with_two_waits", 30, 2_900)
    b.runtime(main, "cudaStreamSynchronize", 40, 980)  # returns 5 us after kernel_a
    b.launch(main, 1_030, 5, "kernel_b", stream=20, kernel_ts=1_040, kernel_dur=1_800)
    b.runtime(main, "cudaDeviceSynchronize", 1_040, 1_803)
    con = analyzed(b, tmp_path)
    counted = path_event_names(con, "ctda")
    assert counted["kernel_a"] == pytest.approx(1_000) and counted["kernel_b"] == pytest.approx(1_800)
    assert counted.get("cudaStreamSynchronize", 0) + counted.get("cudaDeviceSynchronize", 0) < 10
    assert broken_invariants(con) == {}


def test_a_launch_after_two_syncs_returning_at_once_belongs_to_the_later_ones_node(tmp_path):
    """Two syncs return at the same microsecond (the second takes no time): the kernel launched
    after them comes from the wait-return node that spans its launch, the later sync's."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 3_000)
    b.launch(main, 5, 5, "kernel_a", stream=7, kernel_ts=15, kernel_dur=1_000)
    b.cpu_op(main, "my_op", 30, 2_900)
    b.runtime(main, "cudaStreamSynchronize", 40, 980)
    b.runtime(main, "cudaDeviceSynchronize", 1_020, 0)
    b.launch(main, 1_030, 5, "kernel_b", stream=20, kernel_ts=1_040, kernel_dur=1_800)
    con = analyzed(b, tmp_path)
    launcher = con.execute(
        "SELECT s.label, s.start_us, s.end_us FROM edges e "
        "JOIN nodes d ON d.run_id = e.run_id AND d.step = e.step AND d.method = e.method AND d.node_id = e.dst "
        "JOIN nodes s ON s.run_id = e.run_id AND s.step = e.step AND s.method = e.method AND s.node_id = e.src "
        "WHERE e.method = 'ctda' AND e.type = 'call' AND d.label = 'kernel_b'").fetchall()
    assert launcher == [("after cudaDeviceSynchronize", 1_020, 2_930)]
    assert broken_invariants(con) == {}


# ---- python frames (with_stack traces) ----------------------------------------------------

def test_python_frames_change_neither_the_nodes_nor_the_path(tmp_path):
    """with_stack adds python_function frames around the ops: one spanning the step's ops, one
    around aten::linear and one around aten::item. Frames are never top-level ops, so the nodes
    and the path are those of the same trace without them; a frame inside a path node's span
    (the linear's) is one of the node's events."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "framed").mkdir()
    plain = analyzed(item_after_long_kernel(work_after=True), tmp_path / "plain")
    framed_builder = item_after_long_kernel(work_after=True)
    main = framed_builder.thread(100, "pt_main_thread")
    framed_builder.python_function(main, "train.py(12): train_step", 5, 15_550)
    framed_builder.python_function(main, "model.py(30): forward", 10, 50)
    framed_builder.python_function(main, "model.py(40): loss_value", 100, 15_000)
    framed = analyzed(framed_builder, tmp_path / "framed")

    for method in ("ctda", "per_thread"):
        assert path_labels(framed, method) == path_labels(plain, method)
        assert path_event_names(framed, method).keys() - path_event_names(plain, method).keys() <= {
            "model.py(30): forward"}
    labels = [row[0] for row in framed.execute("SELECT label FROM nodes").fetchall()]
    assert not [label for label in labels if ".py(" in label]
    members = framed.execute("SELECT DISTINCT name FROM path_events WHERE method = 'ctda'").fetchall()
    assert ("model.py(30): forward",) in members
    assert path_event_names(framed, "ctda")["long_gemm"] == pytest.approx(15_000)
    assert broken_invariants(framed) == {}


# ---- stream-to-stream hand-offs without cuda_sync events -------------------------------

def handoff_trace(release_gap_us: float) -> TraceBuilder:
    """An all-reduce on the NCCL stream; a compute kernel queued long before on stream 7
    starts `release_gap_us` after it ended (the recorded hand-off); no cuda_sync events."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 6_000)
    b.cpu_op(main, "record_param_comms", 0, 30)
    b.launch(main, 5, 5, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream=20, kernel_ts=20, kernel_dur=5_000)
    b.cpu_op(main, "aten::mm", 40, 30)
    b.launch(main, 45, 5, "sm90_gemm", stream=7, kernel_ts=5_020 + release_gap_us, kernel_dur=900)
    return b


def test_a_kernel_released_9us_after_an_all_reduce_waited_for_it(tmp_path):
    con = analyzed(handoff_trace(9), tmp_path)
    counted = path_event_names(con, "ctda")
    assert counted["ncclDevKernel_AllReduce_Sum_f32_RING_LL"] == pytest.approx(5_000)
    # what is left is the all-reduce's own 10 us launch delay, not the 5 ms it ran
    assert remainder(con)["launch_delay_us"] <= 10 + 1e-6
    assert con.execute("SELECT bool_and(inferred) FROM edges WHERE type = 'sync'").fetchone()[0] is True


def test_a_tight_wait_gap_misses_the_hand_off_and_names_the_wait_unexplained(tmp_path):
    # the kernel sat queued on an idle stream from 50 to 5,029: without the hand-off the
    # cause is not in the trace, and the cpcr report says so instead of calling it launch delay
    con = analyzed(handoff_trace(9), tmp_path, AnalysisSettings(wait_gap_us=5))
    assert "ncclDevKernel_AllReduce_Sum_f32_RING_LL" not in path_event_names(con, "ctda")
    assert remainder(con)["queued_idle_us"] == pytest.approx(4_979)
    assert remainder(con)["launch_delay_us"] < 10


# ---- steps partition the timeline --------------------------------------------------------

def spill_trace() -> TraceBuilder:
    """Step 1 launches a 3 ms kernel at its end; it runs 2.5 ms into step 2, where a kernel
    queued behind it gates a sync."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 1_000)
    b.cpu_op(main, "aten::conv", 400, 100)
    b.launch(main, 450, 10, "long_conv", stream=7, kernel_ts=500, kernel_dur=3_000)
    b.step(2, main, 1_000, 3_000)
    b.cpu_op(main, "aten::relu", 1_100, 50)
    b.launch(main, 1_110, 10, "relu_kernel", stream=7, kernel_ts=3_510, kernel_dur=400)
    b.cpu_op(main, "aten::item", 1_200, 2_790)
    b.runtime(main, "cudaStreamSynchronize", 1_210, 2_705)
    b.cpu_op(main, "aten::add", 3_930, 60)
    return b


def test_steps_run_to_the_next_step_and_count_no_time_twice(tmp_path):
    con = analyzed(spill_trace(), tmp_path)
    steps = con.execute("SELECT step, start_us, end_us FROM steps ORDER BY step").fetchall()
    assert steps == [(1, 0.0, 1_000.0), (2, 1_000.0, 4_000.0)]
    conv = con.execute("SELECT step, sum(self_us) FROM path_events WHERE name = 'long_conv' "
                       "AND method = 'ctda' GROUP BY step ORDER BY step").fetchall()
    # 500 us in step 1, the 2.5 ms that spilled over in step 2 as carry-in: 3 ms in all, once
    assert conv == [(1, pytest.approx(500)), (2, pytest.approx(2_500))]
    windows = dict(con.execute("SELECT step, window_us FROM analysis_windows").fetchall())
    assert windows == {1: 1_000.0, 2: 3_000.0}
    assert broken_invariants(con) == {}


def test_the_cpcr_report_agrees_with_the_steps_table(tmp_path):
    con = analyzed(spill_trace(), tmp_path)
    step_us = dict(con.execute("SELECT step, dur_us FROM steps").fetchall())
    for step in (1, 2):
        row = remainder(con, step)
        assert row["step_us"] == pytest.approx(step_us[step])
        parts = ("path_us", "cpu_gap_us", "gpu_idle_us", "launch_delay_us", "between_nodes_us",
                 "slack_before_us", "slack_after_us", "queued_idle_us")
        assert sum(row[p] for p in parts) == pytest.approx(step_us[step])


# ---- work in flight when profiling starts --------------------------------------------------

def test_kernels_launched_before_profiling_are_carry_in_of_the_first_step(tmp_path):
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    # queued before the profiler started: correlation ids with no launch call in the trace
    b.gpu_op("kernel_before_profiling", 7, -300, 800, correlation=90_001)
    b.gpu_op("queued_before_profiling", 7, 500, 700, correlation=90_002)
    b.step(1, main, 0, 1_500)
    b.cpu_op(main, "aten::mm", 10, 40)
    b.launch(main, 20, 10, "mm_kernel", stream=7, kernel_ts=1_200, kernel_dur=250)
    con = analyzed(b, tmp_path)
    # times are relative to the run's origin, the earliest event (-300 here)
    carry = con.execute("SELECT count(*), min(start_us) - 300, max(end_us) - 300 FROM nodes "
                        "WHERE carry_in AND method = 'ctda'").fetchone()
    assert carry == (1, -300.0, 1_200.0)
    counted = path_event_names(con, "ctda")
    # counted from the window start only: 500 of the first, all 700 of the second
    assert counted["kernel_before_profiling"] == pytest.approx(500)
    assert counted["queued_before_profiling"] == pytest.approx(700)
    assert counted["mm_kernel"] == pytest.approx(250)


# ---- device ops overlapping on one stream (issue 18's repro) -----------------------------

def test_overlapping_device_ops_on_one_stream_never_count_more_than_the_step(tmp_path):
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.cpu_op(main, "aten::add", 785 - 785, 0)
    b.launch(main, 0, 0, "k_1", stream=7, kernel_ts=4, kernel_dur=1_627, call="cudaMemcpyAsync")
    b.launch(main, 4, 0, "Memcpy HtoD", stream=7, kernel_ts=6, kernel_dur=1_744, cat="gpu_memcpy")
    con = analyzed(b, tmp_path)
    assert broken_invariants(con) == {}
    assert cpcr(con, "ctda") <= 1
    assert remainder(con)["gpu_idle_us"] >= 0


# ---- every accelerator ---------------------------------------------------------------------

def test_mtia_device_work_makes_device_nodes(tmp_path):
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 1_000)
    b.cpu_op(main, "aten::mm", 10, 50)
    call, _ = b.launch(main, 20, 10, "mtia_matmul", stream=3, kernel_ts=100, kernel_dur=850,
                       cat="mtia_ccp_events", call="runFunction - job_prep_and_submit_for_execution")
    call["cat"] = "mtia_runtime"
    con = analyzed(b, tmp_path)
    assert con.execute("SELECT count(*) FROM nodes WHERE kind = 'gpu' AND method = 'ctda'").fetchone()[0] == 1
    assert path_event_names(con, "ctda")["mtia_matmul"] == pytest.approx(850)


def test_every_kernel_of_a_cuda_graph_launch_is_on_the_path(tmp_path):
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 1_100)
    call, first = b.launch(main, 10, 20, "graph_gemm_1", stream=7, kernel_ts=35, kernel_dur=300,
                           call="cudaGraphLaunch")
    for index, ts in enumerate((336, 640), start=2):
        b.gpu_op(f"graph_gemm_{index}", 7, ts, 300, correlation=first["args"]["correlation"])
    b.cpu_op(main, "aten::item", 40, 1_000)
    b.runtime(main, "cudaStreamSynchronize", 45, 950)
    con = analyzed(b, tmp_path)
    counted = path_event_names(con, "ctda")
    assert {f"graph_gemm_{i}" for i in (1, 2, 3)} <= set(counted)
    assert counted.get("cudaStreamSynchronize", 0) < 10


# ---- events that overlap without nesting -------------------------------------------------

def op_starting_before_the_sync_returns() -> TraceBuilder:
    """Timestamps rounded apart from their durations: the op after a cudaDeviceSynchronize
    begins 125 ns before the sync returns (5.5 against 5.625 us) and launches the next kernel.
    The wait-return node after the sync holds the sync and that op, and its counted window
    runs from the return (5.625) to the launch's end (6.5): 0.875 us, all of it the op's."""
    b = TraceBuilder(rank=0)  # every ts below is exact at the epoch base (a multiple of 1/4 us)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 7.625)
    b.cpu_op(main, "aten::linear", 0, 1)
    b.cpu_op(main, "aten::relu", 1, 1)
    b.launch(main, 1.0, 0.5, "relu_kernel", stream=7, kernel_ts=3.5, kernel_dur=1)
    b.runtime(main, "cudaDeviceSynchronize", 2, 3.625)
    b.cpu_op(main, "aten::add_", 5.5, 1)
    b.launch(main, 6.0, 0.5, "add_kernel", stream=7, kernel_ts=8.5, kernel_dur=1)
    return b


def test_an_op_running_past_the_sync_before_it_keeps_its_counted_time(tmp_path):
    con = analyzed(op_starting_before_the_sync_returns(), tmp_path)
    counted, on_path = con.execute(
        "SELECT c.counted_us, list(e.name ORDER BY e.name) FROM critical_path c "
        "JOIN path_events e USING (run_id, rank, step, method, node_id) "
        "WHERE c.method = 'ctda' AND c.counted_start_us = 5.625 GROUP BY ALL").fetchone()
    assert counted == pytest.approx(0.875)
    # the sweep gave the time to the sync, which had returned: the path lost it
    assert path_event_names(con, "ctda")["aten::add_"] == pytest.approx(0.875)
    assert "aten::add_" in on_path
    assert broken_invariants(con) == {}
