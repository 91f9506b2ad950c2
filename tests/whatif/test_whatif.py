"""What-if replay: the unchanged replay reproduces every measured step, changes move the
step the way the dependency graph says, and the CLI, shell and tables give the results."""

from __future__ import annotations

import json

import pytest

from ctda_sql.core.connection import connect
from ctda_sql.engine.analyze import analyze
from ctda_sql.ingest.load import ingest
from ctda_sql.shell.app import open_state
from ctda_sql.shell.commands import run_dot_command
from ctda_sql.testing.tracebuilder import TraceBuilder
from ctda_sql.whatif.replay import Scale, Scenario, whatif


def cpu_then_gpu_trace(folder):
    """Step 0-100: relu 10-30, then a launch 50-55 of a kernel running 60-90 on stream 7."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=100)
    builder.cpu_op(main, "aten::relu", ts=10, dur=20)
    builder.launch(main, ts=50, dur=5, kernel="gemm_kernel", stream=7, kernel_ts=60, kernel_dur=30)
    return builder.write(folder / "small.json")


def gpu_bound_trace(folder):
    """Step 0-50 whose kernel runs 20-140: the GPU ends the step at 140."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=50)
    builder.launch(main, ts=10, dur=5, kernel="gemm_kernel", stream=7, kernel_ts=20, kernel_dur=120)
    return builder.write(folder / "gpu_bound.json")


def one_kernel_step(step_us: float):
    """A step 0-step_us whose main thread launches at 10-15 a kernel running 20-120."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=step_us)
    builder.launch(main, ts=10, dur=5, kernel="gemm_kernel", stream=7, kernel_ts=20, kernel_dur=100)
    return builder, main


def stall_before_sync_trace(folder):
    """Step 0-200: a kernel launched at 10-15 runs 20-120; the CPU stalls in data_loading
    20-170 (longer than the kernel), then `aten::item` 172-180 syncs (174-178, no wait: the
    GPU is idle by then) and aten::add runs 182-190."""
    builder, main = one_kernel_step(step_us=200)
    builder.annotation(main, "data_loading", ts=20, dur=150)
    builder.cpu_op(main, "aten::item", ts=172, dur=8)
    builder.runtime(main, "cudaStreamSynchronize", ts=174, dur=4)
    builder.cpu_op(main, "aten::add", ts=182, dur=8)
    return builder.write(folder / "stall_before_sync.json")


def sync_wait_trace(folder):
    """Step 0-150: a kernel launched at 10-15 runs 20-120; `aten::item` 30-125 waits for it in
    cudaStreamSynchronize 32-122; aten::add runs 130-140."""
    builder, main = one_kernel_step(step_us=150)
    builder.cpu_op(main, "aten::item", ts=30, dur=95)
    builder.runtime(main, "cudaStreamSynchronize", ts=32, dur=90)
    builder.cpu_op(main, "aten::add", ts=130, dur=10)
    return builder.write(folder / "sync_wait.json")


def device_sync_trace(folder):
    """Step 0-300: a side kernel launched at 10-15 runs 20-150 on stream 8; data_loading
    stalls 20-200; aten::sum 200-230 launches at 202-206 a kernel running 210-215 on stream 7,
    then waits in cudaDeviceSynchronize 208-218; aten::add runs 240-250."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=300)
    builder.launch(main, ts=10, dur=5, kernel="side_kernel", stream=8, kernel_ts=20, kernel_dur=130)
    builder.annotation(main, "data_loading", ts=20, dur=180)
    builder.cpu_op(main, "aten::sum", ts=200, dur=30)
    builder.launch(main, ts=202, dur=4, kernel="sum_kernel", stream=7, kernel_ts=210, kernel_dur=5)
    builder.runtime(main, "cudaDeviceSynchronize", ts=208, dur=10)
    builder.cpu_op(main, "aten::add", ts=240, dur=10)
    return builder.write(folder / "device_sync.json")


def skewed_stream_trace(folder):
    """Steps 0-1 and 1-3 µs, each running aten::linear (0-1, 1-2) that launches a kernel on
    stream 7: step 1's runs 2.5-4.5, step 2's is recorded at 3.5-4.5, starting before step 1's
    ended (clock skew between the kernels' timestamps, as real traces have)."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    for number, at, kernel_ts, kernel_dur in ((1, 0, 2.5, 2), (2, 1, 3.5, 1)):
        builder.step(number, main, ts=at, dur=1 if number == 1 else 2)
        builder.cpu_op(main, "aten::linear", ts=at, dur=1)
        builder.launch(main, ts=at, dur=0.5, kernel="gemm_kernel", stream=7, kernel_ts=kernel_ts,
                       kernel_dur=kernel_dur)
    return builder.write(folder / "skewed_stream.json")


def full_queue_trace(folder):
    """Step 1 (0-640) launches three 400 µs kernels (10-15, 20-25, 30-630): the third launch
    waits 595 µs for a launch-queue slot (the others take 5 µs), and the kernels run back to
    back 20-1220. Step 2 (640-1300) launches one more at 650-655, which runs 1220-1300."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=640)
    for launch_ts, launch_dur, kernel_ts in ((10, 5, 20), (20, 5, 420), (30, 600, 820)):
        builder.launch(main, ts=launch_ts, dur=launch_dur, kernel="gemm_kernel", stream=7,
                       kernel_ts=kernel_ts, kernel_dur=400)
    builder.step(2, main, ts=640, dur=60)
    builder.launch(main, ts=650, dur=5, kernel="gemm_kernel", stream=7, kernel_ts=1220, kernel_dur=80)
    return builder.write(folder / "full_queue.json")


def slow_launch_trace(folder):
    """Step 0-1000: three launches of 40-65 µs kernels (10-15, 20-25 and a slow 30-630 whose
    kernel starts at 635, right after it returns: the queue had room), then aten::relu
    640-900."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=1000)
    for launch_ts, launch_dur, kernel_ts, kernel_dur in ((10, 5, 20, 40), (20, 5, 70, 40), (30, 600, 635, 65)):
        builder.launch(main, ts=launch_ts, dur=launch_dur, kernel="gemm_kernel", stream=7,
                       kernel_ts=kernel_ts, kernel_dur=kernel_dur)
    builder.cpu_op(main, "aten::relu", ts=640, dur=260)
    return builder.write(folder / "slow_launch.json")


def loader_at_step_start_trace(folder):
    """Step 0-10000 µs whose main thread waits from the step's start for a loader thread's batch:
    the loader stalls 500-4500 and copies 4500-5500; the main thread computes 5600-9000."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    loader = builder.thread(200, "loader")
    builder.step(1, main, ts=0, dur=10000)
    builder.annotation(loader, "loader_stall", ts=500, dur=4000)
    builder.cpu_op(loader, "aten::copy_", ts=4500, dur=1000)
    builder.cpu_op(main, "aten::mm", ts=5600, dur=3400)
    return builder.write(folder / "loader_at_step_start.json")


def loader_across_steps_trace(folder):
    """Two steps (0-10000, 10000-20000 µs) whose main thread waits from each step's start for a
    loader thread's batch, then computes for 3400 µs. The loader stalls 500-4500 and copies
    4500-5500 (batch 1, taken at 5600), then stalls 5600-14500, across the step boundary, and
    copies 14500-15500 (batch 2, taken at 15600)."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    loader = builder.thread(200, "loader")
    for number, at, taken in ((1, 0, 5600), (2, 10000, 15600)):
        builder.step(number, main, ts=at, dur=10000)
        builder.cpu_op(main, "aten::mm", ts=taken, dur=3400)
    for stall_from, copy_from in ((500, 4500), (5600, 14500)):
        builder.annotation(loader, "loader_stall", ts=stall_from, dur=copy_from - stall_from)
        builder.cpu_op(loader, "aten::copy_", ts=copy_from, dur=1000)
    return builder.write(folder / "loader_across_steps.json")


def backward_after_forward_trace(folder):
    """Two steps (0-10000, 10000-20000 µs): the main thread runs forward 100-1150, the
    autograd thread waits from the step's start for it and runs backward 1300-2300, then the
    main thread stalls in data_loading 2500-9500 and adds 9600-9700 (times from each step's
    start)."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    autograd = builder.thread(101, "pt_autograd_0")
    for number, at in ((1, 0), (2, 10000)):
        builder.step(number, main, ts=at, dur=10000)
        builder.cpu_op(main, "aten::mm", ts=at + 100, dur=1050)
        builder.cpu_op(autograd, "MmBackward0", ts=at + 1300, dur=1000)
        builder.annotation(main, "data_loading", ts=at + 2500, dur=7000)
        builder.cpu_op(main, "aten::add", ts=at + 9600, dur=100)
    return builder.write(folder / "backward_after_forward.json")


def async_steps_trace(folder):
    """Two steps of 100 µs with no sync: each launches at +10-15 a 70 µs kernel starting at +20
    and stalls in data_loading +20-95; the GPU is idle at each step's end."""
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    for number, at in ((1, 0), (2, 100)):
        builder.step(number, main, ts=at, dur=100)
        builder.launch(main, ts=at + 10, dur=5, kernel="gemm_kernel", stream=7, kernel_ts=at + 20, kernel_dur=70)
        builder.annotation(main, "data_loading", ts=at + 20, dur=75)
    return builder.write(folder / "async_steps.json")


@pytest.fixture
def small(tmp_path, db_path):
    con = connect(db_path)
    ingest(con, [cpu_then_gpu_trace(tmp_path)], run_name="small", show_progress=False)
    ingest(con, [gpu_bound_trace(tmp_path)], run_name="gpu_bound", show_progress=False)
    ingest(con, [stall_before_sync_trace(tmp_path)], run_name="stall_before_sync", show_progress=False)
    ingest(con, [async_steps_trace(tmp_path)], run_name="async_steps", show_progress=False)
    ingest(con, [sync_wait_trace(tmp_path)], run_name="sync_wait", show_progress=False)
    ingest(con, [full_queue_trace(tmp_path)], run_name="full_queue", show_progress=False)
    ingest(con, [slow_launch_trace(tmp_path)], run_name="slow_launch", show_progress=False)
    ingest(con, [device_sync_trace(tmp_path)], run_name="device_sync", show_progress=False)
    ingest(con, [skewed_stream_trace(tmp_path)], run_name="skewed_stream", show_progress=False)
    ingest(con, [loader_at_step_start_trace(tmp_path)], run_name="loader_at_step_start", show_progress=False)
    ingest(con, [loader_across_steps_trace(tmp_path)], run_name="loader_across_steps", show_progress=False)
    ingest(con, [backward_after_forward_trace(tmp_path)], run_name="backward_after_forward", show_progress=False)
    analyze(con, show_progress=False)
    yield con
    con.close()


def predicted(con, run, *scales, **network):
    rows = whatif(con, run=run, scenario=Scenario(scales=tuple(scales), **network), persist=False).steps
    return [(r[3], r[4], r[5]) for r in rows]


def test_unchanged_replay_is_the_measured_step(small):
    assert predicted(small, "small") == [(100.0, 100.0, 100.0)]
    assert predicted(small, "gpu_bound") == [(140.0, 140.0, 140.0)]


def test_unchanged_replay_keeps_a_recorded_overlap_on_a_stream(small):
    # step 2's kernel starts 1 µs before step 1's ends on the same stream: neither the edge
    # from the carried-in kernel nor the stream's queue across steps may start it later
    # (found by tests/whatif/test_whatif_properties.py; it was replayed at 4.5 µs)
    assert predicted(small, "skewed_stream") == [(1.0, 1.0, 1.0), (3.5, 3.5, 3.5)]


def test_removing_cpu_work_moves_what_follows_it_earlier(small):
    # relu (20 µs) goes; the launch, its kernel and the step end follow it
    assert predicted(small, "small", Scale("aten::relu", 0.0)) == [(100.0, 100.0, 80.0)]
    assert predicted(small, "small", Scale("aten::*", 0.5, "cpu_op")) == [(100.0, 100.0, 90.0)]


def test_a_kernel_that_ends_the_step_sets_its_length(small):
    assert predicted(small, "gpu_bound", Scale("*gemm*", 0.5, "kernel")) == [(140.0, 140.0, 80.0)]
    # work that ends before the step does changes nothing
    assert predicted(small, "small", Scale("*gemm*", 0.5, "kernel")) == [(100.0, 100.0, 100.0)]


def test_a_sync_that_did_not_wait_waits_once_the_cpu_reaches_it_sooner(small):
    # measured, the sync found the GPU idle, so the engine draws no sync edge; without the
    # stall the CPU reaches it at 28 while the kernel runs until 120: the rest of the step
    # (178-200 measured, 22 µs) follows the kernel's end
    assert predicted(small, "stall_before_sync") == [(200.0, 200.0, 200.0)]
    assert predicted(small, "stall_before_sync", Scale("data_loading", 0.0)) == [(200.0, 200.0, 142.0)]


def test_a_sync_that_waited_shortens_with_the_gpu_work(small):
    # the kernel ends 50 µs sooner; the sync returns 2 µs after it as measured (72), and the
    # rest of the step (122-150 measured, 28 µs) follows
    assert predicted(small, "sync_wait") == [(150.0, 150.0, 150.0)]
    assert predicted(small, "sync_wait", Scale("*gemm*", 0.5, "kernel")) == [(150.0, 150.0, 100.0)]


def test_a_sync_that_no_longer_waits_is_not_shown_waiting_on_the_path(small):
    # kernel 20-30: the sync (starting at 32) finds the GPU done; aten::item (30-122 measured,
    # 92 µs with the wait) lasts 2 µs on the predicted path, up to where the rest of it starts
    result = whatif(small, run="sync_wait", scenario=Scenario(scales=(Scale("*gemm*", 0.1, "kernel"),)),
                    persist=False)
    assert [row[5] for row in result.steps] == [60.0]
    assert {label: predicted_us for _, label, _, _, predicted_us in result.hotspots}["aten::item"] == 2.0


def test_a_device_sync_waits_for_every_stream_once_the_cpu_reaches_it_sooner(small):
    # without the stall aten::sum starts at 20 and its kernel runs ~30-35 on stream 7, but
    # cudaDeviceSynchronize also waits for the side kernel on stream 8 (ends 150): the rest of
    # aten::sum runs 150-162, aten::add 172-182 (its measured 10 µs gap), and the 50 µs to the
    # step's end follow: 232, not the side kernel's 150
    assert predicted(small, "device_sync", Scale("data_loading", 0.0)) == [(300.0, 300.0, 232.0)]


def test_a_launch_that_waited_for_a_queue_slot_keeps_the_gpus_pace(small):
    # measured, step 1's CPU keeps the GPU's pace inside the third launch (595 µs waiting)
    assert predicted(small, "full_queue") == [(640.0, 640.0, 640.0), (660.0, 660.0, 660.0)]
    # kernels twice as fast: the wait goes, and the step would last its 640 µs less the 600 µs
    # the GPU work it launched loses (40), so the CPU's 45 µs decide; step 2's kernel queues
    # behind step 1's (20-620) and ends at 660: 615 µs after step 2 starts at 45
    assert predicted(small, "full_queue", Scale("*gemm*", 0.5, "kernel")) == [(640.0, 640.0, 45.0),
                                                                            (660.0, 660.0, 615.0)]
    # faster launches do not help a step that waited for the GPU
    assert predicted(small, "full_queue", Scale("cudaLaunch*", 0.5, "cuda_runtime"))[0] == (640.0, 640.0, 640.0)


def test_a_slow_launch_whose_kernel_starts_at_once_did_not_wait_for_the_queue(small):
    # the 600 µs launch is no launch-queue wait (its kernel started 5 µs after it returned),
    # so the window is not held at the GPU's pace: without aten::relu the CPU side ends at 640
    # plus the 100 µs tail. Taken for a queue wait, the step was predicted unchanged (1000)
    assert predicted(small, "slow_launch", Scale("aten::relu", 0.0)) == [(1000.0, 1000.0, 740.0)]
    assert small.execute("SELECT count(*) FROM wi_queue_waits").fetchone()[0] == 0


def test_a_thread_that_waits_from_the_step_start_waits_less_for_a_faster_loader(small):
    # the main thread's first op (5600) follows the loader's copy (ends 5500): an inferred wait
    # from the step's start; without the 4000 µs stall the copy ends at 1500, so the wait
    # shrinks by 4000 and the step by as much
    assert predicted(small, "loader_at_step_start") == [(10000.0, 10000.0, 10000.0)]
    assert predicted(small, "loader_at_step_start", Scale("loader_stall", 0.0)) == [(10000.0, 10000.0, 6000.0)]


def test_a_loader_stall_across_the_step_boundary_counts_whole_for_the_next_step(small):
    # step 1: as above, the wait shrinks by the 4000 µs stall. Step 2: the threads last met at
    # the hand-off at 5600; the 8900 µs stall since then (4400 of it in step 1) is gone, so
    # batch 2 is ready when step 2 starts: the step is its 3400 µs of compute and the 1000 µs
    # after it. Each wait is counted once: counted four times, step 1 came out negative.
    assert predicted(small, "loader_across_steps") == [(10000.0, 10000.0, 10000.0)] * 2
    assert predicted(small, "loader_across_steps", Scale("loader_stall", 0.0)) == [
        (10000.0, 10000.0, 6000.0), (10000.0, 10000.0, 4400.0)]


def test_a_wait_for_work_that_did_not_change_stays_when_the_previous_step_shrinks(small):
    # halving data_loading removes 3500 µs of the main thread after backward's hand-off in
    # step 1; step 2 starts that much earlier too, so the autograd thread's wait for the
    # unchanged forward stays as it was (1300 µs) and both steps lose just the 3500 µs
    assert predicted(small, "backward_after_forward", Scale("data_loading", 0.5)) == [
        (10000.0, 10000.0, 6500.0), (10000.0, 10000.0, 6500.0)]
    # the autograd thread's waits are the engine's cross_thread edges (mm -> MmBackward0), which
    # move it with the main thread: none is inferred as well (test_handoff_counted_once.py)
    waits = small.execute("SELECT count(*) FROM wi_inferred_waits WHERE lane = 'cpu/1000/101'").fetchone()[0]
    assert waits == 0


def test_gpu_work_queues_behind_the_previous_steps_work_on_its_stream(small):
    # without the stalls each step's CPU side takes 25 µs; step 2's kernel (launched at 35-40)
    # waits for step 1's, which runs 20-90, so it runs 90-160 and the last step ends there
    assert predicted(small, "async_steps") == [(100.0, 100.0, 100.0), (100.0, 100.0, 100.0)]
    assert predicted(small, "async_steps", Scale("data_loading", 0.0)) == [(100.0, 100.0, 25.0),
                                                                          (100.0, 100.0, 135.0)]


def test_a_category_prefix_limits_the_match(small):
    assert predicted(small, "small", Scale("aten::relu", 0.0, "kernel")) == [(100.0, 100.0, 100.0)]


def test_cli_prints_rows_and_keeps_the_scenario(small, run_cli, open_db):
    small.close()
    result = run_cli("whatif", "--run", "small", "--scale", "cpu_op:aten::relu=0", "--name", "no relu",
                     "--format", "csv")
    assert result.code == 0, result.err
    assert "small,0,1,100.0,100.0,80.0,1.25" in result.out
    con = open_db()
    scenario, changes, predicted_us = con.execute(
        "SELECT scenario, changes, predicted_us FROM whatif_steps").fetchone()
    assert (scenario, predicted_us) == ("no relu", 80.0)
    assert json.loads(changes)["scale"] == [{"category": "cpu_op", "pattern": "aten::relu", "factor": 0.0}]
    assert con.execute("SELECT count(*) FROM whatif_path WHERE scenario = 'no relu'").fetchone()[0] >= 1


def test_cli_tables_fit_the_terminal(small, run_cli, monkeypatch):
    # kernel names run to hundreds of characters: the tables fit $COLUMNS as query's do
    small.close()
    monkeypatch.setenv("COLUMNS", "60")
    out = run_cli("whatif", "--run", "small", "--scale", "cpu_op:aten::relu=0").out
    assert "predicted_us" in out and max(len(line) for line in out.splitlines()) == 60
    wide = run_cli("whatif", "--run", "small", "--scale", "cpu_op:aten::relu=0", "--max-width", "0").out
    assert max(len(line) for line in wide.splitlines()) > 60


def test_sweep_prints_one_row_per_value(small, run_cli):
    small.close()
    result = run_cli("whatif", "--run", "small", "--sweep", "comm-bandwidth-scale=1,2,4", "--format", "csv")
    assert result.code == 0, result.err
    assert [line.split(",")[0] for line in result.out.strip().splitlines()[1:]] == ["1.0", "2.0", "4.0"]


@pytest.mark.parametrize("args, message", [
    (["--scale", "aten::relu"], "must look like PATTERN=FACTOR"),
    (["--scale", "aten::relu=-1"], "must be a number from 0 to"),
    (["--sweep", "speed=1,2"], "must look like KEY=V1,V2"),
    (["--run", "nope"], "no run named 'nope'"),
])
def test_bad_input_is_one_error_line(small, run_cli, args, message):
    small.close()
    result = run_cli("whatif", *args)
    assert result.code != 0 and result.err.count("\n") == 1 and result.err.startswith("error:")
    assert message in result.err


def test_the_shell_runs_whatif(small, db_path):
    small.close()
    state = open_state(str(db_path))
    try:
        with state.holding(write=True):  # as the shell's runner does around each input
            steps, totals, hotspots = run_dot_command(state, ".whatif --run small --scale aten::relu=0")
        assert steps.rows[0][5] == 80.0 and hotspots.columns[0] == "kind"
        assert totals.columns[:3] == ["run", "rank", "steps"] and totals.rows[0][5] == 80.0
    finally:
        state.con.close()


# ---- the real shared traces --------------------------------------------------------------

@pytest.fixture(scope="module")
def shared(shared_traces, tmp_path_factory):
    con = connect(tmp_path_factory.mktemp("whatif") / "shared.duckdb")
    for path in sorted(shared_traces.glob("*.json.gz")) + [shared_traces / "two_ranks"]:
        ingest(con, [path], show_progress=False)
    analyze(con, method="ctda", show_progress=False)
    yield con
    con.close()


def test_unchanged_replay_reproduces_every_shared_step_within_1_percent(shared):
    rows = whatif(shared, persist=False).steps
    assert len(rows) == shared.execute("SELECT count(*) FROM analysis_windows").fetchone()[0]
    off = [(run, rank, step) for run, rank, step, measured, replay, *_ in rows
           if abs(replay - measured) > 0.01 * measured]
    assert off == []


def test_the_network_model_is_fitted_on_the_collective_traces(shared):
    whatif(shared, scenario=Scenario(bandwidth_scale=2.0), persist=False)
    fitted = dict(shared.execute(
        "SELECT r.name, count(*) FROM comm_model JOIN runs r USING (run_id) "
        "WHERE bus_bw_gbps > 0 AND alpha_us >= 0 AND samples > 0 GROUP BY r.name").fetchall())
    assert fitted.get("nccl", 0) >= 1 and fitted.get("two_ranks", 0) >= 1


@pytest.mark.parametrize("run", ["nccl", "two_ranks"])
def test_doubling_bandwidth_shortens_a_step_by_at_most_its_communication_on_the_path(shared, run):
    comm_on_path = dict(((rank, step), us) for rank, step, us in shared.execute(
        "SELECT p.rank, p.step, sum(p.self_us) FROM path_events p JOIN runs r USING (run_id) "
        "WHERE r.name = ? AND p.method = 'ctda' AND p.name ILIKE 'nccl%' GROUP BY ALL", [run]).fetchall())
    for _, rank, step, _, replay, faster, *_ in whatif(
            shared, run=run, scenario=Scenario(bandwidth_scale=2.0), persist=False).steps:
        assert faster <= replay + 1e-6
        assert replay - faster <= comm_on_path.get((rank, step), 0.0) + 1e-6


def test_whatif_before_analyze_says_what_to_run(tmp_path, run_cli):
    assert run_cli("ingest", "-q", str(cpu_then_gpu_trace(tmp_path))).code == 0
    result = run_cli("whatif")
    assert result.code == 1 and result.err == "error: no analysed steps match; run `ctda-sql analyze` first (method ctda)\n"
