"""PyTorch 1.8-1.9 Kineto traces (the TensorBoard plugin's samples, many tutorials): categories
Operator, Runtime, Kernel, Memcpy, Memset and Trace, string tids, `stream N` GPU lanes and
`async` launch flows. The warehouse reads them as the plugin does (issue 42 item 3): the same
scenario written with modern and with legacy names has the same critical path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctda_sql.core.connection import connect
from ctda_sql.engine.analyze import analyze
from ctda_sql.ingest.load import ingest
from ctda_sql.testing.tracebuilder import TraceBuilder
from ctda_sql.whatif.changes import Scale, Scenario
from ctda_sql.whatif.replay import whatif

from engine_helpers import remainder

# single_thread_step in the layout of a PyTorch 1.8 file, with the fields the builder leaves out
# (process names, Device / Trace name / cbid / external ts / kernel and copy args, the
# iteration-start instant), one event per line: libkineto's output_json.cpp of that time
SAMPLE_1_8 = Path(__file__).parent / "data" / "legacy" / "single_thread_step.pt.trace.json"


def single_thread_step(legacy: bool) -> TraceBuilder:
    """One CUDA step on one thread, stream 7 (times in us from the step's start):
      aten::to      [0,100)    cudaMemcpyAsync [10,20)  -> Memcpy HtoD [30,80)
      aten::conv2d  [100,200)  cudaLaunchKernel [110,120) -> conv [130,630)
      aten::relu    [200,300)  cudaLaunchKernel [210,220) -> relu [630,730)
      cudaDeviceSynchronize [300,740): returns 10 us after relu ends
      aten::add_    [740,900)  cudaLaunchKernel [750,760) -> add [770,870)
      aten::zero_   [900,1000) cudaMemsetAsync [910,920) -> Memset [930,950)
    ProfilerStep#1 [0,1000). The path by hand: the CPU to conv's launch [0,120), the conv
    kernel [130,630), relu [630,730), the sync's return, then the CPU [740,1000):
    120 + 500 + 100 + 260 = 980 us of 1000 (CPCR 0.98); the rest is conv's launch delay
    (10) and the sync's return after relu (10)."""
    b = TraceBuilder(rank=None, legacy=legacy)
    main = b.thread(100, "python")
    b.stream(7)
    b.step(1, main, ts=0, dur=1000)
    b.cpu_op(main, "aten::to", ts=0, dur=100)
    b.launch(main, ts=10, dur=10, kernel="Memcpy HtoD (Pageable -> Device)", stream=7, kernel_ts=30,
             kernel_dur=50, cat="gpu_memcpy", call="cudaMemcpyAsync")
    b.cpu_op(main, "aten::conv2d", ts=100, dur=100)
    b.launch(main, ts=110, dur=10, kernel="conv", stream=7, kernel_ts=130, kernel_dur=500)
    b.cpu_op(main, "aten::relu", ts=200, dur=100)
    b.launch(main, ts=210, dur=10, kernel="relu", stream=7, kernel_ts=630, kernel_dur=100)
    b.runtime(main, "cudaDeviceSynchronize", ts=300, dur=440)
    b.cpu_op(main, "aten::add_", ts=740, dur=160)
    b.launch(main, ts=750, dur=10, kernel="add", stream=7, kernel_ts=770, kernel_dur=100)
    b.cpu_op(main, "aten::zero_", ts=900, dur=100)
    b.launch(main, ts=910, dur=10, kernel="Memset (Device)", stream=7, kernel_ts=930, kernel_dur=20,
             cat="gpu_memset", call="cudaMemsetAsync")
    return b


def two_thread_step(legacy: bool) -> TraceBuilder:
    """Forward on the main thread, backward on the autograd engine's thread (unnamed, as in
    1.8: found by its backward nodes), the optimizer back on the main thread, stream 7:
      main      aten::linear [0,100)   launch [10,20) -> gemm [30,80)
                aten::mse_loss [100,150) launch [110,120) -> loss [130,140)
      autograd  evaluate_function: MseLossBackward0 [150,250), MseLossBackward0 [155,245) in it,
                  launch [160,170) -> [180,200)
                evaluate_function: AddmmBackward0 [250,400), aten::mm [255,395) in it,
                  launch [260,270) -> [280,330)
                torch::autograd::AccumulateGrad [400,450) launch [410,420) -> [430,440)
      main      Optimizer.step#SGD.step [450,600) (an annotation) holding aten::add_ [450,590),
                  launch [460,470) -> sgd [480,700); cudaDeviceSynchronize [600,710)
    ProfilerStep#1 [0,710). Every kernel but sgd ends before the CPU needs it: the path is
    the CPU [0,450) across both threads, the optimizer to its launch [450,470), sgd [480,700)
    and the sync's return: 450 + 20 + 220 = 690 us of 710; the rest is sgd's launch delay
    (10) and the sync's return after sgd (10)."""
    b = TraceBuilder(rank=None, legacy=legacy)
    main = b.thread(100, "python")
    grad = b.thread(200)
    b.stream(7)
    b.step(1, main, ts=0, dur=710)
    b.cpu_op(main, "aten::linear", ts=0, dur=100)
    b.launch(main, ts=10, dur=10, kernel="gemm", stream=7, kernel_ts=30, kernel_dur=50)
    b.cpu_op(main, "aten::mse_loss", ts=100, dur=50)
    b.launch(main, ts=110, dur=10, kernel="mse_loss", stream=7, kernel_ts=130, kernel_dur=10)
    b.cpu_op(grad, "autograd::engine::evaluate_function: MseLossBackward0", ts=150, dur=100)
    b.cpu_op(grad, "MseLossBackward0", ts=155, dur=90)
    b.launch(grad, ts=160, dur=10, kernel="mse_loss_backward", stream=7, kernel_ts=180, kernel_dur=20)
    b.cpu_op(grad, "autograd::engine::evaluate_function: AddmmBackward0", ts=250, dur=150)
    b.cpu_op(grad, "aten::mm", ts=255, dur=140)
    b.launch(grad, ts=260, dur=10, kernel="gemm_backward", stream=7, kernel_ts=280, kernel_dur=50)
    b.cpu_op(grad, "torch::autograd::AccumulateGrad", ts=400, dur=50)
    b.launch(grad, ts=410, dur=10, kernel="accumulate", stream=7, kernel_ts=430, kernel_dur=10)
    b.annotation(main, "Optimizer.step#SGD.step", ts=450, dur=150)
    b.cpu_op(main, "aten::add_", ts=450, dur=140)
    b.launch(main, ts=460, dur=10, kernel="sgd", stream=7, kernel_ts=480, kernel_dur=220)
    b.runtime(main, "cudaDeviceSynchronize", ts=600, dur=110)
    return b


def data_loading_step(legacy: bool) -> TraceBuilder:
    """A step that waits on data, like the plugin's ResNet-50 samples: Python under
    enumerate(DataLoader)#... (untraced) before its one op, then the input copy and a kernel:
      enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ [0,600) (an annotation),
        aten::stack [500,590) in it
      aten::to      [600,700)  cudaMemcpyAsync [610,620) -> Memcpy HtoD [620,680)
      aten::conv2d  [700,800)  cudaLaunchKernel [710,720) -> conv [720,970)
      cudaDeviceSynchronize [800,980); ProfilerStep#1 [0,1000)
    The path by hand: aten::stack [500,590) 90, the CPU [600,720) to conv's launch 120, conv
    [720,970) 250: 460 of 1000 (CPCR 0.46). The rest: 500 before the path (nothing traced
    in the DataLoader's first 500 us), 10 + 10 between nodes, 20 after the sync's return."""
    b = TraceBuilder(rank=None, legacy=legacy)
    main = b.thread(100, "python")
    b.stream(7)
    b.step(1, main, ts=0, dur=1000)
    b.annotation(main, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", ts=0, dur=600)
    b.cpu_op(main, "aten::stack", ts=500, dur=90)
    b.cpu_op(main, "aten::to", ts=600, dur=100)
    b.launch(main, ts=610, dur=10, kernel="Memcpy HtoD (Pageable -> Device)", stream=7, kernel_ts=620,
             kernel_dur=60, cat="gpu_memcpy", call="cudaMemcpyAsync")
    b.cpu_op(main, "aten::conv2d", ts=700, dur=100)
    b.launch(main, ts=710, dur=10, kernel="conv", stream=7, kernel_ts=720, kernel_dur=250)
    b.runtime(main, "cudaDeviceSynchronize", ts=800, dur=180)
    return b


def analyzed_trace(path: Path, folder: Path):
    con = connect(folder / "legacy.duckdb")
    ingest(con, [path], run_name="scenario", show_progress=False)
    analyze(con, show_progress=False)
    return con


def critical_path(con, method: str = "ctda") -> list[tuple]:
    return con.execute(
        "SELECT c.seq, n.kind, n.label, round(c.counted_start_us, 3), round(c.counted_end_us, 3), "
        "round(c.counted_us, 3), c.gap_kind, round(c.gap_before_us, 3) "
        "FROM critical_path c JOIN nodes n USING (run_id, rank, step, method, node_id) "
        "WHERE c.method = ? ORDER BY c.step, c.seq", [method]).fetchall()


def path_ops(con, method: str = "ctda") -> dict[str, float]:
    """Counted self time of each CPU op on the path, by name (an Operator row read as an
    annotation would show here too, had it reached the path)."""
    rows = con.execute(
        "SELECT name, sum(self_us) FROM path_events WHERE method = ? AND cat IN ('cpu_op', 'Operator') "
        "GROUP BY name", [method]).fetchall()
    return {name: total for name, total in rows if total > 0}


@pytest.fixture(params=[single_thread_step, two_thread_step, data_loading_step],
                ids=["single_thread", "two_threads", "data_loading"])
def scenario(request):
    return request.param


def written_both_ways(scenario, tmp_path):
    """Connections to the scenario written with modern names and with legacy names."""
    cons = []
    for legacy in (False, True):
        folder = tmp_path / ("legacy" if legacy else "modern")
        folder.mkdir()
        cons.append(analyzed_trace(scenario(legacy).write(folder / "trace.json"), folder))
    return cons


def test_the_builder_writes_the_1_8_format():
    # what libkineto's output_json.cpp of PyTorch 1.8-1.9 wrote: the plugin's samples have it
    events = single_thread_step(legacy=True).to_dict()["traceEvents"]
    timed = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in timed} == {"Operator", "Runtime", "Kernel", "Memcpy", "Memset", "Trace"}
    assert all(isinstance(e["tid"], str) for e in timed)
    assert {e["tid"] for e in timed if e["cat"] in ("Kernel", "Memcpy", "Memset")} == {"stream 7"}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == 5
    assert {e["cat"] for e in [*starts.values(), *ends.values()]} == {"async"}
    conv_call = next(e for e in timed if e["cat"] == "Runtime" and e["ts"] - timed[0]["ts"] == 110)
    conv_op = next(e for e in timed if e["name"] == "aten::conv2d")
    assert conv_call["args"]["external id"] == conv_op["args"]["External id"]


def test_ingest_keeps_the_legacy_categories(tmp_path):
    # lossless: `events` holds each category as the file has it; only the reading maps them
    con = analyzed_trace(single_thread_step(legacy=True).write(tmp_path / "trace.json"), tmp_path)
    cats = {cat for (cat,) in con.execute("SELECT DISTINCT cat FROM events WHERE cat IS NOT NULL").fetchall()}
    assert cats == {"Operator", "Runtime", "Kernel", "Memcpy", "Memset", "Trace", "async"}


def test_legacy_single_thread_step_has_the_hand_derived_path(tmp_path):
    con = analyzed_trace(single_thread_step(legacy=True).write(tmp_path / "trace.json"), tmp_path)
    row = remainder(con)
    assert row["cpcr"] == pytest.approx(0.98)
    assert (row["launch_delay_us"], row["between_nodes_us"], row["cpu_gap_us"]) == (10, 10, 0)
    assert [(kind, label) for _, kind, label, *_ in critical_path(con)] == [
        ("cpu", "aten::to"), ("gpu", "conv"), ("cpu", "after cudaDeviceSynchronize"), ("cpu", "aten::add_")]
    ops = path_ops(con)
    assert {"aten::to", "aten::conv2d", "aten::add_", "aten::zero_"} <= ops.keys()
    assert "ProfilerStep#1" not in ops  # the step marker is a step, not an op


def test_legacy_two_thread_step_reads_the_autograd_thread(tmp_path):
    con = analyzed_trace(two_thread_step(legacy=True).write(tmp_path / "trace.json"), tmp_path)
    roles = dict(con.execute("SELECT tid, role FROM threads WHERE tid IN ('100', '200')").fetchall())
    assert roles == {"100": "main", "200": "autograd"}
    assert remainder(con)["cpcr"] == pytest.approx(690 / 710)
    path = critical_path(con)
    assert [label for _, _, label, *_ in path[:4]] == [
        "aten::linear", "aten::mse_loss", "autograd::engine::evaluate_function: MseLossBackward0", "aten::add_"]
    ops = path_ops(con)
    assert {"aten::mm", "torch::autograd::AccumulateGrad", "MseLossBackward0"} <= ops.keys()
    # Optimizer.step#SGD.step is a record_function range: an annotation giving its op a phase
    assert "Optimizer.step#SGD.step" not in ops
    phase = con.execute("SELECT phase FROM nodes WHERE method = 'ctda' AND label = 'aten::add_'").fetchone()[0]
    assert phase == "Update"


def test_modern_and_legacy_names_give_the_same_critical_path(scenario, tmp_path):
    modern, legacy = written_both_ways(scenario, tmp_path)
    for method in ("ctda", "per_thread"):
        assert critical_path(legacy, method) == critical_path(modern, method)
        assert path_ops(legacy, method) == path_ops(modern, method)
    assert remainder(legacy) == remainder(modern)


def test_modern_and_legacy_names_replay_alike(scenario, tmp_path):
    # what-if works from the same nodes: halving the ops, or dropping the syncs, predicts the same
    predicted = []
    for con in written_both_ways(scenario, tmp_path):
        for changes in (Scenario(scales=(Scale("aten::*", 0.5),)), Scenario(drop_syncs=True)):
            whatif(con, scenario=changes, name=changes.as_json(), top=0)
        predicted.append(con.execute(
            "SELECT scenario, step, measured_us, replay_us, predicted_us FROM whatif_steps ORDER BY ALL").fetchall())
    modern, legacy = predicted
    assert legacy == modern and len(modern) == 2
    assert any(predicted_us < measured_us for _, _, measured_us, _, predicted_us in modern)  # not a no-op


def test_a_step_under_0_8_names_the_rest_and_where_it_lies(tmp_path):
    con = analyzed_trace(data_loading_step(legacy=True).write(tmp_path / "trace.json"), tmp_path)
    row = remainder(con)
    assert row["cpcr"] == pytest.approx(0.46)
    assert (row["slack_before_us"], row["between_nodes_us"], row["slack_after_us"]) == (500, 20, 20)
    assert row["note"] == (
        "CPCR 0.46: the rest is mostly slack_before_us (0.5 ms, 50% of the step): the step's start, "
        "before the path's first node, mostly inside enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ "
        "(time the trace does not explain: untraced Python, data loading or a wait)")
    # per_thread paths leave threads out by design: no note there
    assert remainder(con, method="per_thread")["note"] is None


def test_a_step_at_0_8_or_more_has_no_note(tmp_path):
    con = analyzed_trace(single_thread_step(legacy=True).write(tmp_path / "trace.json"), tmp_path)
    assert remainder(con)["note"] is None


def test_a_file_in_the_1_8_layout_reads_like_the_modern_trace(tmp_path, run_cli):
    assert run_cli("ingest", str(SAMPLE_1_8), "--run", "sample").code == 0
    (tmp_path / "sample").mkdir()
    sample = analyzed_trace(SAMPLE_1_8, tmp_path / "sample")
    modern = analyzed_trace(single_thread_step(legacy=False).write(tmp_path / "modern.json"), tmp_path)
    assert critical_path(sample) == critical_path(modern)
    assert remainder(sample)["cpcr"] == pytest.approx(0.98)


def test_a_gpu_op_without_a_stream_arg_takes_it_from_its_stream_lane(tmp_path):
    # the lane of a 1.8 GPU op is "stream N": enough when args.stream is missing
    trace = single_thread_step(legacy=True).to_dict()
    for event in trace["traceEvents"]:
        if event.get("cat") in ("Kernel", "Memcpy", "Memset"):
            del event["args"]["stream"]
    path = tmp_path / "no_stream_args.json"
    path.write_text(json.dumps(trace))
    (tmp_path / "legacy").mkdir()
    legacy = analyzed_trace(path, tmp_path / "legacy")
    assert legacy.execute("SELECT DISTINCT stream FROM events WHERE cat = 'Kernel'").fetchall() == [(7,)]
    modern = analyzed_trace(single_thread_step(legacy=False).write(tmp_path / "modern.json"), tmp_path)
    assert critical_path(legacy) == critical_path(modern)
