"""Hand-offs between streams weighed by the evidence, and device idle time whose cause the
trace does not hold (issue 31, parts 1 and 2). Every answer is derived by hand in comments."""

from __future__ import annotations

import pytest

from ctda_sql.engine.analyze import AnalysisSettings
from ctda_sql.testing.tracebuilder import TraceBuilder

from engine_helpers import analyzed, path_event_names, remainder
from invariants import broken_invariants

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def inferred_sources(con, target_label: str) -> list[str]:
    """Labels of the GPU nodes an inferred sync edge leads from into the node `target_label`."""
    return [row[0] for row in con.execute("""
        SELECT s.label FROM edges e
        JOIN nodes s ON s.run_id = e.run_id AND s.rank = e.rank AND s.step = e.step
            AND s.method = e.method AND s.node_id = e.src
        JOIN nodes d ON d.run_id = e.run_id AND d.rank = e.rank AND d.step = e.step
            AND d.method = e.method AND d.node_id = e.dst
        WHERE e.method = 'ctda' AND e.type = 'sync' AND e.inferred AND d.label = ?""", [target_label]).fetchall()]


def long_wait_handoff(release_gap_us: float) -> TraceBuilder:
    """An all-reduce runs 40 ms on the NCCL stream (20 .. 40,020); a GEMM launched at 45-50 on
    stream 7 sits queued for 40 ms and starts `release_gap_us` after the all-reduce ends."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 45_000)
    b.cpu_op(main, "record_param_comms", 0, 30)
    b.launch(main, 5, 5, NCCL, stream=20, kernel_ts=20, kernel_dur=40_000)
    b.cpu_op(main, "aten::mm", 40, 30)
    b.launch(main, 45, 5, "sm90_gemm", stream=7, kernel_ts=40_020 + release_gap_us, kernel_dur=900)
    return b


def test_a_30us_hand_off_after_a_40ms_wait_puts_the_collective_on_the_path(tmp_path):
    # the GEMM waited 40,000 us (from its launch's return at 50 to 40,050): a 30 us gap is a
    # thousandth of that, inside the adaptive tolerance (a tenth of the wait, at most 100 us)
    con = analyzed(long_wait_handoff(30), tmp_path)
    assert path_event_names(con, "ctda")[NCCL] == pytest.approx(40_000)
    assert inferred_sources(con, "sm90_gemm") == [NCCL]
    rest = remainder(con)
    # left: the all-reduce's own launch (10 -> 20) and the 30 us hand-off between nodes
    assert rest["launch_delay_us"] == pytest.approx(10)
    assert rest["between_nodes_us"] == pytest.approx(30)
    assert rest["queued_idle_us"] == 0
    assert broken_invariants(con) == {}


def test_a_fixed_tolerance_still_overrides_and_the_missed_wait_is_named_not_launch_delay(tmp_path):
    # --wait-gap-us 15: the 30 us hand-off is not seen; the GEMM's 40 ms queued on an idle
    # stream (50 .. 40,050) is device idle with work queued, cause not in the trace
    con = analyzed(long_wait_handoff(30), tmp_path, AnalysisSettings(wait_gap_us=15))
    assert NCCL not in path_event_names(con, "ctda")
    rest = remainder(con)
    assert rest["queued_idle_us"] == pytest.approx(40_000)
    assert rest["launch_delay_us"] == pytest.approx(0)
    assert "device idle with work queued" in rest["note"]


def unrelated_short_op() -> TraceBuilder:
    """The GEMM (stream 7) is launched at 50-55 and starts at 6,020. Its real cause, a copy on
    stream 30, ended at 1,020, 5 ms earlier. A 5 us kernel on stream 20, launched at 5,905
    (after the GEMM), ends at 5,990: 30 us before the GEMM starts, by coincidence."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 8_000)
    b.cpu_op(main, "aten::copy_", 0, 20)
    b.launch(main, 5, 5, "Memcpy HtoD (Pinned -> Device)", stream=30, kernel_ts=20, kernel_dur=1_000)
    b.cpu_op(main, "aten::mm", 40, 30)
    b.launch(main, 50, 5, "sm90_gemm", stream=7, kernel_ts=6_020, kernel_dur=900)
    b.cpu_op(main, "aten::add", 5_900, 20)
    b.launch(main, 5_905, 5, "short_add_kernel", stream=20, kernel_ts=5_985, kernel_dur=5)
    return b


def test_a_kernel_launched_after_the_waiting_op_is_never_its_cause(tmp_path):
    con = analyzed(unrelated_short_op(), tmp_path)
    # no false edge: the short kernel was launched after the GEMM was queued, and the copy
    # ended 5,000 us before the GEMM started (the tolerance for a 5,965 us wait is 100 us)
    assert inferred_sources(con, "sm90_gemm") == []
    assert "short_add_kernel" not in path_event_names(con, "ctda")
    # the GEMM sat queued on an idle stream from 55 to 6,020: named, not blamed on a neighbour
    assert remainder(con)["queued_idle_us"] == pytest.approx(5_965)
    assert broken_invariants(con) == {}


def idle_with_work_queued() -> TraceBuilder:
    """One op launches two kernels on stream 7 at 10-15 and 20-25: the first runs 30-1,030,
    the second, queued since 25, starts at 21,030. Nothing else runs on the device, but a
    neighbour kernel on stream 20 (launched first) ends at 20,530, 500 us before it."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 23_000)
    b.cpu_op(main, "aten::neighbour", 0, 8)
    b.launch(main, 1, 4, "neighbour_kernel", stream=20, kernel_ts=19_530, kernel_dur=1_000)
    b.cpu_op(main, "aten::conv", 9, 20)
    b.launch(main, 10, 5, "conv_a", stream=7, kernel_ts=30, kernel_dur=1_000)
    b.launch(main, 20, 5, "conv_b", stream=7, kernel_ts=21_030, kernel_dur=1_000)
    return b


def test_device_idle_with_queued_work_and_no_cause_is_named(tmp_path):
    con = analyzed(idle_with_work_queued(), tmp_path)
    # 500 us is more than the tolerance of a 20,000 us wait (capped at 100 us): no edge
    assert inferred_sources(con, "conv_a") == []
    rest = remainder(con)
    # conv_b sat queued on an idle stream from 1,030 (conv_a's end) to 21,030
    assert rest["queued_idle_us"] == pytest.approx(20_000)
    assert rest["gpu_idle_us"] == pytest.approx(0)
    assert "device idle with work queued for 20.0 ms" in rest["note"]
    assert broken_invariants(con) == {}


def starved_device() -> TraceBuilder:
    """A device with nothing to do: the second kernel is launched 5 ms after the first ended."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 8_000)
    b.cpu_op(main, "aten::conv", 0, 6_100)
    b.launch(main, 10, 5, "conv_a", stream=7, kernel_ts=30, kernel_dur=1_000)
    b.launch(main, 6_030, 5, "conv_b", stream=7, kernel_ts=6_040, kernel_dur=1_000)
    return b


def test_a_device_that_had_nothing_to_do_is_not_called_queued(tmp_path):
    # one GPU node (no split): the 5,010 us between conv_a's end (1,030) and conv_b's start
    # (6,040) came before conv_b was launched (6,035): GPU idle, not queued idle
    con = analyzed(starved_device(), tmp_path, AnalysisSettings(split_starved=False))
    rest = remainder(con)
    assert rest["gpu_idle_us"] == pytest.approx(5_010)
    assert rest["queued_idle_us"] == 0
    assert rest["note"].startswith("CPCR 0.25: the rest is mostly gpu_idle_us (5.0 ms")
    assert "queued" not in rest["note"]
    assert broken_invariants(con) == {}
