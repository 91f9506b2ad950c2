"""Trace analyses (docs/analyses.md) on hand-made traces with hand-derived answers."""

from __future__ import annotations

import json

import pytest

from ctda_sql.testing.tracebuilder import TraceBuilder

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
# newer NCCL names its kernels ncclDevKernel_*: communication all the same
NEW_NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def report(run_cli, name: str, **params) -> list[dict]:
    args = [f"{key}={value}" for key, value in params.items()]
    result = run_cli("report", name, *[p for arg in args for p in ("--param", arg)], "--format", "json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def gpu_mix(builder: TraceBuilder, nccl_name: str = NCCL) -> TraceBuilder:
    """One thread, no steps (whole trace). Stream 7: gemm [10,40), memcpy [45,55),
    relu [80,100), tiny [120,122); stream 20: NCCL [20,60)."""
    main = builder.thread(100, "pt_main_thread")
    builder.cpu_op(main, "aten::linear", ts=0, dur=16)
    builder.cpu_op(main, "aten::linear", ts=5, dur=10)  # nested match: not a root
    builder.launch(main, ts=0, dur=5, kernel="gemm", stream=7, kernel_ts=10, kernel_dur=30)
    builder.launch(main, ts=6, dur=4, kernel=nccl_name, stream=20, kernel_ts=20, kernel_dur=40)
    builder.launch(main, ts=12, dur=3, kernel="Memcpy HtoD (Pageable -> Device)", stream=7,
                   kernel_ts=45, kernel_dur=10, cat="gpu_memcpy", call="cudaMemcpyAsync")
    builder.cpu_op(main, "aten::linear", ts=68, dur=42)
    builder.launch(main, ts=70, dur=5, kernel="relu", stream=7, kernel_ts=80, kernel_dur=20)
    builder.launch(main, ts=100, dur=8, kernel="tiny", stream=7, kernel_ts=120, kernel_dur=2)
    return builder


@pytest.fixture
def mix_db(run_cli, builder, tmp_path):
    path = gpu_mix(builder).write(tmp_path / "mix.json.gz")
    assert run_cli("ingest", str(path), "--run", "mix").code == 0


def test_temporal_breakdown_counts_overlap_once_and_compute_wins(run_cli, mix_db):
    # span 10..122 = 112; busy [10,60) + [80,100) + [120,122) = 72 -> idle 40;
    # compute [10,40) + [80,100) + [120,122) = 52; non-compute 72 - 52 = 20
    [row] = report(run_cli, "temporal_breakdown", run="mix")
    assert (row["kernel_us"], row["idle_us"], row["compute_us"], row["non_compute_us"]) == (112, 40, 52, 20)
    assert row["idle_pct"] == pytest.approx(35.71) and row["compute_pct"] == pytest.approx(46.43)


def test_comm_overlap_is_share_of_comm_time_under_compute(run_cli, mix_db):
    # NCCL [20,60) = 40 us, compute covers [20,40) = 20 us -> 50 %
    [row] = report(run_cli, "comm_overlap", run="mix")
    assert (row["communication_us"], row["overlapped_us"], row["overlap_pct"]) == (40, 20, 50)


def test_newer_nccl_kernel_names_are_communication_in_every_report(run_cli, builder, tmp_path):
    path = gpu_mix(builder, NEW_NCCL).write(tmp_path / "new_nccl.json.gz")
    assert run_cli("ingest", str(path), "--run", "new").code == 0
    [row] = report(run_cli, "comm_overlap", run="new")
    assert (row["communication_us"], row["overlapped_us"]) == (40, 20)
    kinds = {r["name"]: r["kernel_type"] for r in report(run_cli, "kernel_breakdown", run="new", top=3)}
    assert kinds[NEW_NCCL] == "communication"
    [temporal] = report(run_cli, "temporal_breakdown", run="new")
    assert (temporal["compute_us"], temporal["non_compute_us"]) == (52, 20)


def test_idle_time_categories_and_threshold(run_cli, mix_db):
    # stream 7 gaps: 5 (launch before prev end: kernel_wait), 25 (launch at 70 > 55:
    # host_wait), 20 (launch at 100 = prev end: not host; < 30: kernel_wait)
    rows = report(run_cli, "idle_time", run="mix")
    by_category = {r["category"]: (r["idle_us"], r["ratio"]) for r in rows if r["stream"] == 7}
    assert by_category == {"host_wait": (25, 0.5), "kernel_wait": (25, 0.5), "other": (0, 0)}
    rows = report(run_cli, "idle_time", run="mix", kernel_wait_us=10)
    by_category = {r["category"]: r["idle_us"] for r in rows if r["stream"] == 7}
    assert by_category == {"host_wait": 25, "kernel_wait": 5, "other": 20}
    assert not [r for r in rows if r["stream"] == 20]  # one op: no gap


def test_kernel_breakdown_classes_and_top_kernels(run_cli, mix_db):
    rows = report(run_cli, "kernel_breakdown", run="mix", top=1)
    top = {r["kernel_type"]: (r["name"], r["total_us"], r["type_total_us"]) for r in rows}
    assert top == {"compute": ("gemm", 30, 52), "communication": (NCCL, 40, 40),
                   "memory": ("Memcpy HtoD (Pageable -> Device)", 10, 10)}


def test_launch_stats_durations_delays_and_flags(run_cli, mix_db):
    rows = report(run_cli, "launch_stats", run="mix", runtime_cutoff_us=4.5, launch_delay_cutoff_us=11)
    by_kernel = {r["kernel_name"]: r for r in rows}
    # delay = kernel start - end of its launch call
    assert {k: (r["cpu_us"], r["gpu_us"], r["launch_delay_us"]) for k, r in by_kernel.items()} == {
        "gemm": (5, 30, 5), NCCL: (4, 40, 10), "Memcpy HtoD (Pageable -> Device)": (3, 10, 30),
        "relu": (5, 20, 5), "tiny": (8, 2, 12)}
    assert [k for k, r in by_kernel.items() if r["short_kernel"]] == ["tiny"]
    assert sorted(k for k, r in by_kernel.items() if r["runtime_outlier"]) == ["gemm", "relu", "tiny"]
    assert sorted(k for k, r in by_kernel.items() if r["launch_delay_outlier"]) == [
        "Memcpy HtoD (Pageable -> Device)", "tiny"]
    flagged = report(run_cli, "launch_stats", run="mix", flagged_only="true", include_memory="false")
    assert sorted(r["kernel_name"] for r in flagged) == ["tiny"]


def test_launch_stats_keeps_the_longest_delays_first(run_cli, mix_db):
    rows = report(run_cli, "launch_stats", run="mix", top=2)
    assert [(r["kernel_name"], r["launch_delay_us"]) for r in rows] == [
        ("Memcpy HtoD (Pageable -> Device)", 30), ("tiny", 12)]
    # equal delays (gemm, relu: 5 us) rank by CPU time, then launch time
    rows = report(run_cli, "launch_stats", run="mix", top="NULL")
    assert [r["kernel_name"] for r in rows] == ["Memcpy HtoD (Pageable -> Device)", "tiny", NCCL, "gemm", "relu"]


def test_queue_length_summary_and_blocked_time(run_cli, mix_db):
    # stream 7 change points: 0:+1 10:-1 12:+1 45:-1 70:+1 80:-1 100:+1 120:-1
    # -> values 1,0,1,0,1,0,1,0; length 1 held 10+33+10+20 = 73 of 120 us
    rows = report(run_cli, "queue_length", run="mix", max_queue_length=1)
    [row] = [r for r in rows if r["stream"] == 7]
    assert (row["change_points"], row["max_queue_length"], row["mean_queue_length"]) == (8, 1, 0.5)
    assert row["time_weighted_mean"] == pytest.approx(73 / 120)
    assert row["blocked_us"] == 73
    assert report(run_cli, "queue_length", run="mix")[0]["blocked_us"] == 0


def test_kernel_sequences_under_outermost_operator(run_cli, mix_db):
    rows = report(run_cli, "kernel_sequences", run="mix", operator="aten::linear")
    assert [(r["kernel_sequence"], r["occurrences"], r["gpu_us"], r["cpu_us"]) for r in rows] == [
        (f"gemm -> {NCCL} -> Memcpy HtoD (Pageable -> Device)", 1, 80, 16)]
    rows = report(run_cli, "kernel_sequences", run="mix", operator="linear", min_length=2)
    assert sorted(r["kernel_sequence"] for r in rows)[-1] == "relu -> tiny"


def test_kernel_sequences_count_a_launch_under_every_root_holding_it(run_cli, builder, tmp_path):
    # roots on one thread that overlap without nesting: A [0,20), B [10,30] and C [30,40]
    # (C starts where B ends); launches at 5, 15, 25, 30, 35 -> A: 5, 15; B: 15, 25, 30; C: 30, 35
    main = builder.thread(1, "pt_main_thread")
    for ts, dur in ((0, 20), (10, 20), (30, 10)):
        builder.cpu_op(main, "aten::linear", ts=ts, dur=dur)
    for ts in (5, 15, 25, 30, 35):
        builder.launch(main, ts=ts, dur=0, kernel=f"k{ts}", stream=7, kernel_ts=100 + ts, kernel_dur=1)
    run_cli("ingest", str(builder.write(tmp_path / "o.json")), "--run", "o")
    rows = report(run_cli, "kernel_sequences", run="o", min_length=1)
    assert sorted(r["kernel_sequence"] for r in rows) == ["k15 -> k25 -> k30", "k30 -> k35", "k5 -> k15"]


def test_percentiles_interpolate_linearly(run_cli, builder, tmp_path):
    for i in range(1, 101):
        builder.gpu_op("k", stream=7, ts=i * 200, dur=i)
    run_cli("ingest", str(builder.write(tmp_path / "p.json")), "--run", "p")
    [row] = report(run_cli, "percentiles", run="p", cat="kernel")
    assert (row["event_count"], row["p50_us"]) == (100, 50.5)
    assert row["p95_us"] == pytest.approx(95.05) and row["p99_us"] == pytest.approx(99.01)


def test_step_trend_buckets(run_cli, builder, tmp_path):
    main = builder.thread(1, "pt_main_thread")
    start = 0
    for number, dur in zip(range(1, 5), (10, 20, 30, 50)):
        builder.step(number, main, ts=start, dur=dur)
        start += dur
    run_cli("ingest", str(builder.write(tmp_path / "s.json")), "--run", "s")
    rows = report(run_cli, "step_trend", run="s", bucket_steps=2)
    assert [(r["first_step"], r["last_step"], r["mean_step_us"]) for r in rows] == [(1, 2, 15), (3, 4, 40)]
    assert rows[0]["stddev_step_us"] == pytest.approx(7.0711, abs=1e-4)
    assert rows[1]["cv"] == pytest.approx(0.3536, abs=1e-4)


def three_ranks(tmp_path, step_us: tuple[int, ...]):
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank, dur in enumerate(step_us):
        b = TraceBuilder(rank=rank, world_size=len(step_us))
        main = b.thread(1, "pt_main_thread")
        b.step(1, main, ts=0, dur=dur)
        b.annotation(main, "## forward ##", ts=0, dur=dur / 2)
        b.write(folder / f"rank-{rank}.json")
    return folder


def test_stragglers_z_score_and_measure_validation(run_cli, tmp_path):
    # 100, 100, 400: mean 200, population stddev 141.42 -> z = -0.707, -0.707, 1.414
    run_cli("ingest", str(three_ranks(tmp_path, (100, 100, 400))), "--run", "job")
    rows = report(run_cli, "stragglers", run="job", threshold=1.2)
    assert [r["z_score"] for r in rows] == [-0.707, -0.707, 1.414]
    assert [r["straggler"] for r in rows] == [False, False, True]
    rows = report(run_cli, "stragglers", run="job", measure="annotation_us", annotation="## forward ##")
    assert [r["value_us"] for r in rows] == [50, 50, 200]
    bad = run_cli("report", "stragglers", "--param", "measure=1; DROP TABLE events")
    assert bad.code != 0 and "measure must be one of" in bad.err


def test_run_diff_counts_times_and_changes(run_cli, tmp_path):
    for run, ops in (("a", [("aten::add", 5)] * 2 + [("aten::mul", 3)]),
                     ("b", [("aten::add", 4)] * 3 + [("aten::div", 7)])):
        b = TraceBuilder(rank=0)
        main = b.thread(1)
        for i, (name, dur) in enumerate(ops):
            b.cpu_op(main, name, ts=i * 10, dur=dur)
        run_cli("ingest", str(b.write(tmp_path / f"{run}.json")), "--run", run)
    rows = {r["name"]: r for r in report(run_cli, "run_diff", run_a="a", run_b="b")}
    assert (rows["aten::add"]["count_a"], rows["aten::add"]["count_b"], rows["aten::add"]["diff_us"]) == (2, 3, 2)
    assert {name: r["change"] for name, r in rows.items()} == {
        "aten::add": "more", "aten::mul": "removed", "aten::div": "added"}
    assert run_cli("report", "run_diff", "--param", "run_a=a").code != 0


def test_collectives_metadata_and_bus_bandwidth(run_cli, builder, tmp_path):
    main = builder.thread(1, "pt_main_thread")
    comms = {"Collective name": "allreduce", "In msg nelems": 1_000_000, "Out msg nelems": 1_000_000,
             "Group size": 4, "dtype": "Float", "Process Group Name": "0",
             "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1, 2, 3]"}
    builder.cpu_op(main, "record_param_comms", ts=0, dur=20, **comms)
    builder.launch(main, ts=5, dur=5, kernel=NCCL, stream=20, kernel_ts=30, kernel_dur=1000)
    gather = {"Collective name": "_allgather_base", "In msg nelems": 250_000, "Out msg nelems": 500_000,
              "Group size": 2, "dtype": "Half", "Process Group Name": "1"}
    builder.launch(main, ts=2000, dur=5, kernel="ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                   stream=20, kernel_ts=2010, kernel_dur=100, **gather)
    run_cli("ingest", str(builder.write(tmp_path / "c.json")), "--run", "c")
    rows = report(run_cli, "collectives", run="c")
    # allreduce: 4 MB in 1 ms = 4 GB/s, bus x 2(n-1)/n = 1.5 -> 6; allgather: 1 MB in 100 us
    # = 10 GB/s, bus x (n-1)/n = 0.5 -> 5
    assert [(r["collective"], r["msg_bytes"], r["algbw_gbps"], r["busbw_gbps"], r["meta_source"]) for r in rows] == [
        ("allreduce", 4_000_000, 4.0, 6.0, "record_param_comms"),
        ("_allgather_base", 1_000_000, 10.0, 5.0, "kernel")]
    assert (rows[0]["group_size"], rows[0]["process_group"], rows[0]["process_group_desc"]) == (4, "0", "default_pg")


def ingest_two_steps(run_cli, builder, path, run: str, launches) -> None:
    """Steps 1 and 2 (100 us each) with (launch_ts, kernel, kernel_ts, kernel_dur) launches on stream 7."""
    main = builder.thread(1, "pt_main_thread")
    builder.step(1, main, ts=0, dur=100)
    builder.step(2, main, ts=100, dur=100)
    for launch_ts, kernel, kernel_ts, kernel_dur in launches:
        builder.launch(main, ts=launch_ts, dur=5, kernel=kernel, stream=7, kernel_ts=kernel_ts, kernel_dur=kernel_dur)
    run_cli("ingest", str(builder.write(path)), "--run", run)


def test_last_step_is_out_of_scope_unless_asked(run_cli, builder, tmp_path):
    # two steps: HTA's scope drops GPU work launched in the last one
    ingest_two_steps(run_cli, builder, tmp_path / "t.json", "t", [(10, "a", 20, 30), (110, "b", 120, 10)])
    assert report(run_cli, "temporal_breakdown", run="t")[0]["kernel_us"] == 30
    assert report(run_cli, "temporal_breakdown", run="t", include_last_step="true")[0]["kernel_us"] == 110
    assert report(run_cli, "temporal_breakdown", run="t", include_last_step="true", step=2)[0]["kernel_us"] == 10


def test_run_diff_gpu_ops_follow_their_launch_step_and_whole_runs_skip_steps(run_cli, builder, tmp_path):
    # late_kernel is launched in step 1 and runs during step 2: HTA's iterations put it in step 1
    ingest_two_steps(run_cli, builder, tmp_path / "x.json", "x",
                     [(90, "late_kernel", 120, 30), (110, "step2_kernel", 160, 10)])
    by_step = {r["name"]: (r["count_a"], r["count_b"])
               for r in report(run_cli, "run_diff", run_a="x", run_b="x", step_a=1, step_b=2, device="gpu")}
    assert by_step == {"late_kernel": (1, 0), "step2_kernel": (0, 1)}
    whole = {r["name"]: (r["count_a"], r["total_us_b"])
             for r in report(run_cli, "run_diff", run_a="x", run_b="x", device="gpu")}
    assert whole == {"late_kernel": (1, 30), "step2_kernel": (1, 10)}
