"""PyTorch 1.8-1.9 Kineto traces (the TensorBoard plugin's samples, many tutorials): categories
Operator, Runtime, Kernel, Memcpy, Memset and Trace, string tids, `stream N` GPU lanes and
`async` launch flows. The warehouse reads them as the plugin does (issue 42 item 3): the same
scenario written with modern and with legacy names has the same critical path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctda_sql.api import Warehouse
from ctda_sql.core import sqlfiles
from ctda_sql.core.connection import connect
from ctda_sql.engine.analyze import analyze
from ctda_sql.ingest.load import ingest
from ctda_sql.testing.tracebuilder import TraceBuilder
from ctda_sql.whatif.changes import Scale, Scenario
from ctda_sql.whatif.replay import whatif

from engine_helpers import remainder
from helpers.jobs import gloo_ddp_rank

# single_thread_step in the layout of a PyTorch 1.8 file, with the fields the builder leaves out
# (process names, Device / Trace name / cbid / external ts / kernel and copy args, the
# iteration-start instant), one event per line: libkineto's output_json.cpp of that time
SAMPLE_1_8 = Path(__file__).parents[1] / "data" / "legacy" / "single_thread_step.pt.trace.json"


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


# ---- every reading of the warehouse, not only the path: collectives, what-if, reports -------
# (issue 42 item 3) Each scenario is ingested twice into one warehouse, as run modern_X and
# legacy_X; a report on the legacy run must read as it does on the modern one.

ALL_REDUCE_DIMS = {"Input Dims": [[1048576]], "Input type": ["float"]}  # 4 MiB


def nccl_rank(rank: int, legacy: bool) -> TraceBuilder:
    """A DDP step on NCCL, both ranks alike, the kernel without collective metadata (as in
    every trace of that era): its size comes from the nccl:all_reduce annotation around the
    launch (an Operator row in the 1.8 file):
      aten::mm [0,100)          launch [10,20)   -> gemm on stream 7 [30,230)
      c10d::allreduce_ [100,150) holding nccl:all_reduce [105,145), launch [110,120)
                                                  -> ncclKernel_AllReduce on stream 20 [230,830)
      cudaDeviceSynchronize [150,840), aten::add_ [840,940); ProfilerStep#1 [0,1000)"""
    b = TraceBuilder(rank=rank, world_size=2, pid=1000 + rank, legacy=legacy)
    main = b.thread(100 + rank, "pt_main_thread")
    b.stream(7)
    b.stream(20)
    b.step(1, main, ts=0, dur=1000)
    b.cpu_op(main, "aten::mm", ts=0, dur=100)
    b.launch(main, ts=10, dur=10, kernel="gemm", stream=7, kernel_ts=30, kernel_dur=200)
    b.cpu_op(main, "c10d::allreduce_", ts=100, dur=50)
    b.annotation(main, "nccl:all_reduce", ts=105, dur=40, **ALL_REDUCE_DIMS)
    b.launch(main, ts=110, dur=10, kernel="ncclKernel_AllReduce_RING_LL_Sum_float", stream=20,
             kernel_ts=230, kernel_dur=600)
    b.runtime(main, "cudaDeviceSynchronize", ts=150, dur=690)
    b.cpu_op(main, "aten::add_", ts=840, dur=100)
    return b


SCENARIOS = {
    "single": lambda legacy: [single_thread_step(legacy)],
    "loader": lambda legacy: [data_loading_step(legacy)],
    # helpers.jobs.gloo_ddp_rank of 4 MiB with a forward annotation: rank 0 computes 300 us,
    # rank 1 500 us, so rank 1 arrives last, at 522
    "gloo": lambda legacy: [gloo_ddp_rank(rank, compute, step, nelems=1048576, forward=True, legacy=legacy)
                            for rank, compute, step in ((0, 300, 905), (1, 500, 900))],
    "nccl": lambda legacy: [nccl_rank(0, legacy), nccl_rank(1, legacy)],
}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One warehouse holding every scenario twice: runs modern_X and legacy_X."""
    root = tmp_path_factory.mktemp("legacy_reports")
    warehouse = Warehouse(root / "w.duckdb")
    for name, ranks in SCENARIOS.items():
        for legacy in (False, True):
            run = f"{'legacy' if legacy else 'modern'}_{name}"
            folder = root / run
            folder.mkdir()
            for builder in ranks(legacy):
                builder.write(folder / f"rank-{builder.rank}.json")
            warehouse.ingest(folder, run=run)
    warehouse.analyze()
    yield warehouse
    warehouse.close()


def run_id(warehouse, run: str) -> int:
    return warehouse.sql("SELECT run_id FROM runs WHERE name = $run", {"run": run}).fetchall()[0][0]


def report_rows(warehouse, report: str, run: str, drop: tuple[str, ...] = ("run", "category", "cat"),
                **params) -> list[tuple]:
    """A saved report's rows for `run`, without the columns that name the run or the file's
    category (Operator where the modern file says cpu_op)."""
    relation = warehouse.report(report, run=run, **params)
    keep = [i for i, column in enumerate(relation.columns) if column not in drop]
    return [tuple(row[i] for i in keep) for row in relation.fetchall()]


def path_of(warehouse, run: str, rank: int = 0, method: str = "ctda") -> list[tuple]:
    return warehouse.sql(
        "SELECT n.label, n.phase, round(p.counted_us, 3) FROM critical_path AS p "
        "JOIN runs AS r USING (run_id) "
        "JOIN nodes AS n ON n.run_id = p.run_id AND n.rank = p.node_rank AND n.step = p.step "
        " AND n.method = (CASE WHEN p.method = 'cross_rank' THEN 'ctda' ELSE p.method END) AND n.node_id = p.node_id "
        "WHERE r.name = $run AND p.rank = $rank AND p.method = $method ORDER BY p.seq",
        {"run": run, "rank": rank, "method": method}).fetchall()


def predicted(warehouse, run: str, **changes) -> list[tuple]:
    """(rank, measured, predicted) of each step of `run` under the what-if `changes`."""
    return sorted(warehouse.whatif(run=run, name=f"{run} {changes}", **changes)
                  .project("rank, step, measured_us, predicted_us").fetchall())


@pytest.mark.parametrize("method", ["ctda", "per_thread", "cross_rank"])
def test_a_legacy_gloo_collective_is_on_the_path_as_communication(both, method):
    """By hand (tests/engine/test_gloo_path.py), rank 0: the compute, the call until gloo picks it up,
    the execution on the worker, the update: 300 + 2 + 500 + 50 us. Across ranks the path
    leaves for rank 1, whose arrival the all-reduce waited for: 500 + 2, then 300 + 50."""
    expected = {"ctda": [("aten::mm", "Forward", 300), ("c10d::allreduce_", "Communication", 2),
                         ("gloo:all_reduce", "Communication", 500), ("aten::add_", "Forward", 50)],
                "cross_rank": [("aten::mm", "Forward", 500), ("c10d::allreduce_", "Communication", 2),
                               ("gloo:all_reduce", "Communication", 300), ("aten::add_", "Forward", 50)]}
    legacy = path_of(both, "legacy_gloo", method=method)
    assert legacy == expected.get(method, expected["ctda"])
    assert legacy == path_of(both, "modern_gloo", method=method)


def test_the_collectives_worker_execution_is_a_communication_op(both):
    # cp_comm_ops: the gloo executions outside the logical thread, one per rank
    rows = both.sql("SELECT rank, name, tid FROM cp_comm_ops WHERE run_id = $r ORDER BY rank",
                    {"r": run_id(both, "legacy_gloo")}).fetchall()
    assert rows == [(0, "gloo:all_reduce", "500"), (1, "gloo:all_reduce", "501")]


def test_the_network_what_if_models_a_legacy_gloo_collective(both):
    """Twice the bandwidth halves the transfer after the last arrival (rank 1's call at 522,
    the end at 822): 150 us less on both ranks."""
    assert predicted(both, "legacy_gloo", comm_bandwidth_scale=2.0) == [(0, 1, 905, 755), (1, 1, 900, 750)]
    assert predicted(both, "modern_gloo", comm_bandwidth_scale=2.0) == [(0, 1, 905, 755), (1, 1, 900, 750)]


def test_the_network_what_if_models_a_legacy_nccl_kernel_from_its_annotation(both):
    """The kernel's 4 MiB come from the Operator row nccl:all_reduce around its launch: a
    2-rank ring all-reduce puts 2 (n - 1) / n = 1x its bytes on the bus, in 600 us (6.99 GB/s).
    Twice the bandwidth: 300 us, and the sync, the update and the step's tail follow it:
    1000 - 300 us on both ranks."""
    for run in ("legacy_nccl", "modern_nccl"):
        assert predicted(both, run, comm_bandwidth_scale=2.0) == [(0, 1, 1000, 700), (1, 1, 1000, 700)], run
    model = both.sql("SELECT collective, round(bus_bw_gbps, 3), samples FROM comm_model WHERE run_id = $r",
                     {"r": run_id(both, "legacy_nccl")}).fetchall()
    assert model == [("allreduce", round(4 * 2**20 / 600 / 1000, 3), 2)]


def test_a_category_selector_names_legacy_operators_by_their_modern_category(both):
    """cpu_op:aten::mm=0.5: rank 1's compute ends 250 us sooner, so does its call and, 300 us
    of transfer after it, the all-reduce on both ranks: 250 us less each."""
    assert predicted(both, "legacy_gloo", scale={"cpu_op:aten::mm": 0.5}) == [(0, 1, 905, 655), (1, 1, 900, 650)]
    assert predicted(both, "modern_gloo", scale={"cpu_op:aten::mm": 0.5}) == [(0, 1, 905, 655), (1, 1, 900, 650)]
    # the file's own category names them too; another category does not
    assert predicted(both, "legacy_gloo", scale={"Operator:aten::mm": 0.5}) == [(0, 1, 905, 655), (1, 1, 900, 650)]
    assert predicted(both, "legacy_gloo", scale={"user_annotation:aten::mm": 0.5}) == [
        (0, 1, 905, 905), (1, 1, 900, 900)]


def test_a_kernel_selector_names_legacy_kernels(both):
    for run in ("modern_single", "legacy_single"):
        # conv [130,630) halved: 250 us less (relu, the sync and the rest follow it)
        assert predicted(both, run, scale={"kernel:conv": 0.5}) == [(0, 1, 1000, 750)], run


def test_the_demo_top_ops_list_the_legacy_operators_and_gpu_ops(both):
    top = sqlfiles.load("demo/top_ops.sql")
    rows = {}
    for run in ("modern_single", "legacy_single"):
        rows[run] = [(name, calls, total) for name, _, calls, total, _ in
                     both.sql(top, {"run_id": run_id(both, run), "top": 20}).fetchall()]
    assert rows["legacy_single"] == rows["modern_single"]
    assert {"aten::to", "aten::conv2d", "conv", "Memcpy HtoD (Pageable -> Device)", "Memset (Device)"} <= {
        name for name, *_ in rows["legacy_single"]}


@pytest.mark.parametrize("scenario_name, op", [("single", "aten::add_"), ("gloo", "aten::mm")])
def test_hotspots_and_percentiles_read_legacy_runs_alike(both, scenario_name, op):
    modern, legacy = f"modern_{scenario_name}", f"legacy_{scenario_name}"
    hot = report_rows(both, "hotspots", legacy)
    assert hot == report_rows(both, "hotspots", modern)
    assert op in {row[0] for row in hot}
    for cat in ("cpu_op", "user_annotation", "kernel", "cuda_runtime", "gpu_memcpy"):
        rows = report_rows(both, "percentiles", legacy, cat=cat)
        assert rows == report_rows(both, "percentiles", modern, cat=cat), cat
    assert report_rows(both, "percentiles", legacy, cat="cpu_op")  # not empty


def test_cross_rank_hotspots_count_a_legacy_annotation(both):
    legacy = report_rows(both, "cross_rank_hotspots", "legacy_gloo")
    assert legacy == report_rows(both, "cross_rank_hotspots", "modern_gloo")
    # rank 1's forward annotation encloses its compute on the cross-rank path
    assert ("## forward ##" in {row[1] for row in legacy})


def test_path_diff_names_a_legacy_annotation(both):
    def diff(side: str) -> list[tuple]:
        return both.report("path_diff", run_a=f"{side}_single", run_b=f"{side}_loader").fetchall()
    legacy = diff("legacy")
    assert legacy == diff("modern")
    assert any("enumerate(DataLoader)" in str(row[1]) for row in legacy), legacy


def test_the_async_flows_pair_each_launch_with_the_gpu_op_it_started(both):
    """A 1.8 file links launches by correlation and draws each link as an `s`/`f` flow of cat
    `async`: every flow starts at the launch call and ends at the GPU op that the warehouse
    links to that call, and every linked GPU op has its flow."""
    pairs = both.sql("""
        WITH flows AS (
            SELECT extra ->> 'id' AS flow_id, any_value(ts_us) FILTER (WHERE ph = 's') AS call_ts_us,
                   any_value(ts_us) FILTER (WHERE ph = 'f') AS gpu_ts_us
            FROM events WHERE run_id = $r AND ph IN ('s', 'f') AND cat = 'async' GROUP BY ALL
        ),
        linked AS (
            SELECT correlation::VARCHAR AS flow_id, launch_ts_us, ts_us FROM analysis_gpu_ops WHERE run_id = $r
        )
        SELECT flow_id, g.launch_ts_us = f.call_ts_us AND g.ts_us = f.gpu_ts_us
        FROM linked AS g FULL JOIN flows AS f USING (flow_id)
        ORDER BY 1""", {"r": run_id(both, "legacy_single")}).fetchall()
    # five launches; correlation 4 is cudaDeviceSynchronize's, which launched nothing
    assert pairs == [("1", True), ("2", True), ("3", True), ("5", True), ("6", True)]


RUN_REPORTS = ["clock_offsets", "collective_skew", "collectives", "comm_overlap", "cpcr", "cross_rank_hotspots",
               "hotspots", "idle_time", "kernel_breakdown", "kernel_sequences", "launch_stats", "percentiles",
               "queue_length", "step_trend", "stragglers", "temporal_breakdown", "unmatched_collectives",
               "waiting_on"]


@pytest.mark.parametrize("report", RUN_REPORTS)
def test_every_report_on_a_run_reads_the_legacy_run_as_the_modern_one(both, report):
    params = {"operator": "aten::"} if report == "kernel_sequences" else {}
    for scenario_name in SCENARIOS:
        # the 1.8 file's own Trace span (the builder writes none in the modern form) is an event too
        legacy = [row for row in report_rows(both, report, f"legacy_{scenario_name}", **params)
                  if "PyTorch Profiler (0)" not in row]
        assert legacy == report_rows(both, report, f"modern_{scenario_name}", **params), scenario_name


@pytest.mark.parametrize("scenario", ["loader", "single"])
def test_advise_reads_a_legacy_run_as_the_modern_one(both, scenario):
    """The advice rules and the causal profile class a 1.8 Operator row as an op or an
    annotation by its name, as the path does: the data-loading annotation is found in the
    legacy run, and the findings and the profile's regions are those of the modern run."""
    def advice(side: str) -> tuple[list, list]:
        document = both.advise(run=f"{side}_{scenario}")
        findings = [(f["rule"], f["saving_us"], f["path_us"]) for f in document["findings"]]
        regions = sorted((p["kind"], p["label"], p["path_us"], p["saving_at_zero_us"]) for p in document["profile"])
        return findings, regions
    assert advice("legacy") == advice("modern")
    if scenario == "loader":
        assert any(rule == "data_loading" for rule, *_ in advice("legacy")[0])
