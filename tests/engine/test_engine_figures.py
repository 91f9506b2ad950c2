"""The method paper's four figures as hand-made traces, each with an answer derived by hand."""

from __future__ import annotations

import pytest

from ctda_sql.engine.analyze import AnalysisSettings
from ctda_sql.testing.tracebuilder import TraceBuilder

from engine_helpers import analyzed, cpcr, path_event_names, path_labels
from helpers.traces import figure1_trace, figure2_trace


def test_figure1_ctda_keeps_data_loading_and_forward(tmp_path):
    con = analyzed(figure1_trace(), tmp_path)
    counted = path_event_names(con, "ctda")
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in counted
    assert "aten::linear" in counted and "aten::mse_loss" in counted
    # the optimizer waited for the all-reduce, not for the backward gemm that ended earlier
    assert "ncclDevKernel_AllReduce" in counted and "bwd_gemm" not in counted
    assert path_labels(con, "ctda")[-2:] == ["aten::add_", "sgd_update"]


def test_figure1_per_thread_loses_data_loading_and_forward(tmp_path):
    con = analyzed(figure1_trace(), tmp_path)
    counted = path_event_names(con, "per_thread")
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" not in counted
    assert "aten::linear" not in counted
    assert path_labels(con, "per_thread")[0] == "autograd::engine::evaluate_function: AddmmBackward0"
    assert cpcr(con, "per_thread") < cpcr(con, "ctda")


def test_figure1_edges_have_all_four_kinds(tmp_path):
    con = analyzed(figure1_trace(), tmp_path)
    kinds = {row[0] for row in con.execute("SELECT DISTINCT type FROM edges WHERE method = 'ctda'").fetchall()}
    assert kinds == {"sequential", "call", "sync", "cross_thread"}
    per_thread = con.execute("SELECT count(*) FROM edges WHERE method = 'per_thread' AND type = 'cross_thread'")
    assert per_thread.fetchone()[0] == 0


def test_figure1_phases_come_from_the_rules(tmp_path):
    con = analyzed(figure1_trace(), tmp_path)
    phases = dict(con.execute(
        "SELECT label, phase FROM nodes WHERE method = 'ctda' AND kind = 'cpu'").fetchall())
    assert phases["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] == "DataLoad"
    assert phases["aten::linear"] == "Forward"
    assert phases["aten::mse_loss"] == "Loss"
    assert phases["autograd::engine::evaluate_function: AddmmBackward0"] == "Backward"
    assert phases["record_param_comms"] == "Communication"
    assert phases["aten::add_"] == "Update"


def test_figure2_hidden_longest_kernel_is_not_a_hotspot(tmp_path):
    con = analyzed(figure2_trace(), tmp_path)
    counted = path_event_names(con, "ctda")
    assert "long_conv_kernel" not in counted
    assert max(counted, key=counted.get) == "aten::cpu_heavy_preprocess"
    top = con.execute("SELECT name FROM path_events WHERE method = 'ctda' ORDER BY self_us DESC LIMIT 1")
    assert top.fetchone()[0] == "aten::cpu_heavy_preprocess"


def test_figure2_without_starved_split_the_paper_method_counts_the_hidden_kernel(tmp_path):
    """The paper's stated weakness, kept as a switch: one GPU node per CPU node and stream."""
    con = analyzed(figure2_trace(), tmp_path, AnalysisSettings(split_starved=False))
    assert "long_conv_kernel" in path_event_names(con, "ctda")


def figure3_trace(recorded_waits: bool) -> TraceBuilder:
    """Stream 30 waits on events recorded after a long kernel (stream 7) and a shorter kernel
    that started later (stream 20); the shorter, later one gates it."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 520)
    b.cpu_op(main, "aten::long_op", 0, 20)
    b.launch(main, 5, 5, "long_kernel_s7", stream=7, kernel_ts=30, kernel_dur=370)
    record_long = b.runtime(main, "cudaEventRecord", 22, 2)
    b.cpu_op(main, "aten::short_op", 30, 20)
    b.launch(main, 35, 3, "prep_kernel_s20", stream=20, kernel_ts=45, kernel_dur=255)
    b.launch(main, 40, 3, "short_kernel_s20", stream=20, kernel_ts=300, kernel_dur=150)
    record_short = b.runtime(main, "cudaEventRecord", 52, 2)
    wait_long = b.runtime(main, "cudaStreamWaitEvent", 60, 3)
    wait_short = b.runtime(main, "cudaStreamWaitEvent", 64, 3)
    b.cpu_op(main, "aten::next_op", 80, 10)
    b.launch(main, 82, 5, "next_kernel_s30", stream=30, kernel_ts=455, kernel_dur=45)
    if recorded_waits:
        for wait, record, stream in ((wait_long, record_long, 7), (wait_short, record_short, 20)):
            b.cuda_sync("Stream Wait Event", 30, wait["ts"] - b.base_ts, 0,
                        correlation=wait["args"]["correlation"], wait_on_stream=stream,
                        wait_on_cuda_event_record_corr_id=record["args"]["correlation"])
    return b


@pytest.mark.parametrize("recorded_waits", [True, False], ids=["cuda_sync events", "inferred"])
def test_figure3_later_shorter_kernel_gates_the_next(tmp_path, recorded_waits):
    con = analyzed(figure3_trace(recorded_waits), tmp_path)
    counted = path_event_names(con, "ctda")
    assert "short_kernel_s20" in counted and "next_kernel_s30" in counted
    assert "long_kernel_s7" not in counted
    inferred = con.execute(
        "SELECT bool_or(inferred) FROM edges WHERE method = 'ctda' AND type = 'sync'").fetchone()[0]
    assert inferred is (not recorded_waits)


def figure4_trace() -> TraceBuilder:
    """A CPU op launches a kernel first and keeps working while the kernel runs."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 500)
    b.cpu_op(main, "aten::fused_step", 0, 300)
    b.launch(main, 10, 10, "big_kernel", stream=7, kernel_ts=25, kernel_dur=475)
    b.cpu_op(main, "aten::bookkeeping", 30, 260)
    return b


def test_figure4_cpu_work_overlapping_the_kernel_is_not_counted(tmp_path):
    con = analyzed(figure4_trace(), tmp_path)
    counted = path_event_names(con, "ctda")
    assert "aten::bookkeeping" not in counted
    assert counted["big_kernel"] == pytest.approx(475)
    # the op counts only until its launch returned: 10 µs of own time + 10 µs of the launch
    assert counted["aten::fused_step"] == pytest.approx(10)
    assert counted["cudaLaunchKernel"] == pytest.approx(10)
    assert cpcr(con, "ctda") == pytest.approx((20 + 475) / 500)
