"""How analyze's cost grows with the work (issue 32): cost per event of `analyze --method all`
for one step whose CPU node holds N events, and for 1 .. 64 ranks of one job.

Shapes (each one step on the main thread, written with ctda_sql.testing.tracebuilder):
  nested       N/2 top-level ATen ops, each with one child nested inside it: one CPU node
  overlapping  the same, but one child runs 1 us past its parent's end (an event that overlaps
               another without nesting, as a timestamp rounded apart from its duration makes):
               the counted-time sweep's non-nested case
  small_nodes  N/3 ops, each launching a kernel (op, launch call, kernel); every 4 ops switch
               stream, so the step holds ~N/6 small CPU and GPU nodes
  python_frames  small_nodes as a with_stack trace records it: N/4 ops, each inside a python
               frame of its own (frame, op, launch call, kernel): ~N/8 small nodes on a thread
               of N/4 frames, which the nodes' python-frame lookup pairs up
  syncs        N/4 ops, each launching a 4 us kernel and then waiting for it in a
               cudaStreamSynchronize (op, launch call, kernel, sync): ~N/4 CPU nodes ending in
               a sync, ~N/4 wait returns and ~N/4 GPU nodes in one step, as a loop of .item()
  collectives  2 ranks of one run, each one step of N/8 NCCL all-reduces (c10d call,
               record_param_comms inside it, the launch call inside that, the kernel on a
               stream of its own), the ranks taking turns to arrive 60 us late: the calls'
               joins with their members and kernels, the matching, and a cross-rank path
               through N/8 gates in one step (hopping at each, up to cr_hops' 10,000 hops)
  gloo         the same with gloo all-reduces (the gloo:all_reduce on a worker thread, an op
               resuming on the main thread after it): every call on the main thread's lane,
               among its nodes (what-if's arrivals and gates)
  gloo_steps   gloo in steps of 8 calls: N/64 steps per rank (joins of a rank's calls with its
               windows)
  nccl_annotated  collectives whose kernels carry no metadata: each launch sits in an
               nccl:all_reduce annotation (what-if's collectives of older traces, under a
               network change: 20_collectives.sql's `annotated`)
  handoffs     one rank, N/40 steps of 8 units (aten::mm launching a kernel, a 430 us
               loader::next on a loader thread, the main thread idle 590-990 us until it
               resumes 20 us after it); 3 launches of each step take 400 us and their kernels
               start 150 us after they return: what-if's inferred waits (wi_inferred_waits,
               wi_shrink) under --scenario scale and its launch-queue waits (wi_queue_waits)
  autograd     N/6 ops (op, child, launch, kernel), in runs of 50 taking turns between the main
               thread and the autograd thread: the threads' hand-offs (the GIL link)
  many_streams N/3 ops each launching a 30 us kernel on one of 32 streams in turn: 32 GPU lanes
               whose kernels overlap
  ranks        R rank files of one run, each a small_nodes step of --rank-events events

For the multi-rank shapes, --whatif also times a coupled `whatif(persist=False)` after
analyze, and --cluster sql/whatif/cluster_apply.sql after it (as `whatif --cluster` runs it)
and then the whole `whatif --cluster` on 2 hosts sharing a 0.4 Gbit/s link (SimGrid, the
coupled replay with processor sharing on gloo chains): what-if's coupling
(sql/whatif/45_coupling.sql) and the cluster's gates grow with the calls of a lane and the
nodes around them. --whatif also times handoffs' what-if. --scenario
picks the scenario it replays: unchanged (the default), scale (aten::add_, aten::mm and
loader::* at 0.5) or network (--comm-bandwidth-scale 0.5); a changed scenario runs the
statements an unchanged one skips (inferred waits, the network model). Under a changed
scenario the coupled replay's Python solver took a round per collective of a chain, until it
switched to one ordered pass after 8 rounds (warehouse/whatif/ordered.py): --uncoupled
replays each rank alone, to look at the SQL alone. --statements N prints, under each input, the N
costliest statements of analyze's cross-rank stages and of the what-if, each timed alone.

Cost per event = analyze's wall time / the trace's events (CPU seconds beside it: the machine
is shared, and CPU time moves less). Ingest is not counted. The before/after comparison runs
this script twice, once with --code-dir pointing at a checkout of the code before a change
(`git worktree add /tmp/before COMMIT`); a checkout from before the one-package layout (issue
36) runs with its own copy of this script.

Usage: python bench/bench_growth.py [--sizes 8000 32000 128000] [--shapes nested overlapping
       small_nodes python_frames syncs collectives gloo gloo_steps] [--ranks 1 4 16 64]
       [--rank-events 4000] [--runs 1] [--whatif] [--cluster] [--scenario unchanged|scale|network]
       [--uncoupled] [--statements N] [--code-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from run_checkout import use_checkout  # bench/ is the script's folder, first on sys.path

REPO_DIR = Path(__file__).resolve().parent.parent
SHAPES = ("nested", "overlapping", "small_nodes", "python_frames", "syncs", "autograd", "many_streams",
          "collectives", "gloo", "gloo_steps",
          "nccl_annotated", "handoffs")
MULTI_RANK = ("collectives", "gloo", "gloo_steps", "nccl_annotated")
WHATIF_SHAPES = (*MULTI_RANK, "handoffs", "autograd", "many_streams")
SCENARIOS = ("unchanged", "scale", "network")


def scenario(name: str):
    """--scenario's what-if changes (scale: the ops of every what-if shape)."""
    from ctda_sql.whatif.changes import Scale, Scenario

    if name == "scale":
        return Scenario(scales=(Scale("aten::add_", 0.5), Scale("aten::mm", 0.5), Scale("loader::*", 0.5)))
    return Scenario(bandwidth_scale=0.5) if name == "network" else Scenario()


def _builder(rank: int = 0, world_size: int | None = None):
    from ctda_sql.testing.tracebuilder import TraceBuilder

    return TraceBuilder(rank=rank, world_size=world_size)


def nested_trace(events: int, overlap: bool = False, rank: int = 0, world_size: int | None = None):
    """One step, N/2 parent ops 10 us apart, each holding a 6 us child; with `overlap` the
    middle child ends 1 us after its parent."""
    builder = _builder(rank, world_size)
    main = builder.thread(100, "pt_main_thread")
    pairs = max(1, events // 2)
    builder.step(1, main, ts=0, dur=pairs * 10 + 10)
    for i in range(pairs):
        start = 5 + i * 10
        builder.cpu_op(main, "aten::linear", ts=start, dur=8)
        child_dur = 8.0 if overlap and i == pairs // 2 else 6.0
        builder.cpu_op(main, "aten::addmm", ts=start + 1, dur=child_dur)
    return builder


def small_nodes_trace(events: int, rank: int = 0, world_size: int | None = None, frames: bool = False,
                      streams: int = 2, run: int = 4, kernel_dur: int = 4):
    """One step, N/3 ops 10 us apart, each launching a 4 us kernel; streams 7 and 8 alternate
    every 4 ops, so each run of 4 ops is a CPU node of its own with a GPU node. With `frames`,
    N/4 ops, each inside an 8 us python frame of its own (the op shrinks to 6 us inside it).
    `streams`, `run` and `kernel_dur` change how many streams take turns, every how many ops,
    and the kernels' length (the step runs on until the last kernel ends)."""
    builder = _builder(rank, world_size)
    main = builder.thread(100, "pt_main_thread")
    for stream in range(streams):
        builder.stream(7 + stream)
    ops = max(1, events // (4 if frames else 3))
    builder.step(1, main, ts=0, dur=ops * 10 + 10 + max(kernel_dur, 10))
    for i in range(ops):
        start = 5 + i * 10
        if frames:
            builder.python_function(main, f"model.py({i % 50}): forward", ts=start, dur=8)
        builder.cpu_op(main, "aten::mul", ts=start + frames, dur=8 - 2 * frames)
        builder.launch(main, ts=start + 1 + frames, dur=3, kernel="mul_kernel", stream=7 + (i // run) % streams,
                       kernel_ts=start + 6, kernel_dur=kernel_dur)
    return builder


def syncs_trace(events: int):
    """One step, N/4 ops 20 us apart: each launches a 4 us kernel on stream 7 and waits for it
    in a cudaStreamSynchronize that returns 1 us after the kernel ends."""
    builder = _builder()
    main = builder.thread(100, "pt_main_thread")
    builder.stream(7)
    ops = max(1, events // 4)
    builder.step(1, main, ts=0, dur=ops * 20 + 20)
    for i in range(ops):
        start = 5 + i * 20
        builder.cpu_op(main, "aten::item", ts=start, dur=14)
        builder.launch(main, ts=start + 1, dur=2, kernel="mul_kernel", stream=7,
                       kernel_ts=start + 4, kernel_dur=4)
        builder.runtime(main, "cudaStreamSynchronize", ts=start + 3, dur=6)
    return builder


def collectives_trace(events: int, rank: int, world_size: int = 2, gloo: bool = False,
                      calls_per_step: int | None = None, annotated: bool = False):
    """`events` / 4 all-reduces of the group 100 us apart (4 events each), in one step or in
    steps of `calls_per_step`. Ranks take turns to arrive 60 us late (call i: rank i mod
    world_size), and every rank's side ends 12 us after the last arrival, so each call is a
    gate of the cross-rank path and the path hops rank at every one. NCCL: the call launches
    its kernel on stream 20 from inside record_param_comms. gloo: a worker thread runs the
    all-reduce, and an op on the main thread resumes 1 us after it ends. `annotated` (NCCL):
    the kernel carries no metadata, the launch sits in an nccl:all_reduce annotation."""
    builder = _builder(rank, world_size)
    builder.pid = 1000 + rank
    main = builder.thread(100, "pt_main_thread")
    worker = builder.thread(500, "gloo worker") if gloo else None
    if not gloo:
        builder.stream(20)
    calls = max(1, events // 4)
    per_step = calls_per_step or calls
    for step in range(0, calls, per_step):
        builder.step(step // per_step + 1, main, ts=step * 100, dur=min(per_step, calls - step) * 100)
    meta = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
            "Process Group Name": "0", "Process Group Ranks": str(list(range(world_size))),
            "Group size": world_size}
    for i in range(calls):
        base = 5 + i * 100
        start = base + (60 if i % world_size == rank else 0)
        end = base + 60 + 12  # the last arrival's start + 12
        builder.cpu_op(main, "c10d::allreduce_", ts=start, dur=5 if gloo else 8,
                       **{"Input Dims": [[[1024]]], "Input type": ["TensorList"]})
        builder.cpu_op(main, "record_param_comms", ts=start + 1, dur=3 if gloo else 6, **meta)
        if gloo:
            builder.annotation(worker, "gloo:all_reduce", ts=start + 2, dur=end - start - 2,
                               **{"Input Dims": [[1024]], "Input type": ["float"]})
            builder.cpu_op(main, "aten::add_", ts=end + 1, dur=4)
        else:
            if annotated:
                builder.annotation(main, "nccl:all_reduce", ts=start + 2, dur=3,
                                   **{"Input Dims": [[1024]], "Input type": ["float"]})
            builder.launch(main, ts=start + 2, dur=2, kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream=20,
                           kernel_ts=start + 5, kernel_dur=end - start - 5, **({} if annotated else meta))
    return builder


def handoffs_trace(events: int):
    """N/5 units of 1100 us in steps of 8: aten::mm launches a 50 us kernel; a loader thread's
    loader::next ends 20 us before the main thread resumes in aten::copy_ (idle since the mm
    ended: a hand-off). Units 0, 3 and 6 of a step launch in 400 us, their kernels starting
    150 us after the launch returns (a full launch queue: 3 x ~400 us of a 8,800 us step)."""
    builder = _builder()
    main, loader = builder.thread(100, "pt_main_thread"), builder.thread(200, "loader")
    builder.stream(7)
    units = max(8, events // 5 // 8 * 8)
    for step in range(units // 8):
        builder.step(step + 1, main, ts=step * 8800, dur=8800)
    for i in range(units):
        base, slow = i * 1100, i % 8 in (0, 3, 6)
        launch = 400 if slow else 3
        builder.cpu_op(main, "aten::mm", ts=base + 1, dur=launch + 8)
        builder.launch(main, ts=base + 2, dur=launch, kernel="mm_kernel", stream=7,
                       kernel_ts=base + 2 + launch + (150 if slow else 2), kernel_dur=50)
        builder.cpu_op(loader, "loader::next", ts=base + 550, dur=430)
        builder.cpu_op(main, "aten::copy_", ts=base + 1000, dur=50)
    return builder


def autograd_trace(events: int):
    """One step, N/6 ops 20 us apart (op, child op, launch, 10 us kernel on stream 7): runs of 50
    ops on the main thread and on the autograd thread in turn."""
    builder = _builder()
    main, backward = builder.thread(100, "pt_main_thread"), builder.thread(200, "pt_autograd_0")
    builder.stream(7)
    ops = max(1, events // 6)
    builder.step(1, main, ts=0, dur=ops * 20 + 40)
    for i in range(ops):
        start, lane = 5 + i * 20, main if (i // 50) % 2 == 0 else backward
        builder.cpu_op(lane, "aten::mm" if lane is main else "MmBackward0", ts=start, dur=12)
        builder.cpu_op(lane, "aten::addmm", ts=start + 1, dur=8)
        builder.launch(lane, ts=start + 2, dur=3, kernel="gemm", stream=7, kernel_ts=start + 6, kernel_dur=10)
    return builder


def shape_trace(shape: str, events: int):
    if shape == "syncs":
        return syncs_trace(events)
    if shape == "small_nodes":
        return small_nodes_trace(events)
    if shape == "python_frames":
        return small_nodes_trace(events, frames=True)
    if shape == "handoffs":
        return handoffs_trace(events)
    if shape == "autograd":
        return autograd_trace(events)
    if shape == "many_streams":
        return small_nodes_trace(events, streams=32, run=1, kernel_dur=30)
    return nested_trace(events, overlap=shape == "overlapping")


def shape_paths(shape: str, events: int, folder: Path) -> list[Path]:
    """The shape's rank files: the multi-rank shapes write N/2 events per rank."""
    if shape in MULTI_RANK:
        return [collectives_trace(events // 2, rank, 2, gloo=shape not in ("collectives", "nccl_annotated"),
                                  calls_per_step=8 if shape == "gloo_steps" else None,
                                  annotated=shape == "nccl_annotated").write(folder / f"rank-{rank}.json")
                for rank in range(2)]
    return [shape_trace(shape, events).write(folder / "trace.json")]


def cpu_timed(work) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


class StatementTimes:
    """While active, every statement of the cross-rank stages (sql/crossrank) and of what-if
    (sql/whatif) is run one at a time and its CPU time recorded, by the stage runner
    (core.stages.run_stage), replaced for the while."""

    def __init__(self):
        self.times: list[tuple[float, str, str]] = []

    def run(self, con, name: str, statements, values: dict) -> None:
        for statement, names in statements:
            cpu = time.process_time()
            con.execute(statement, {key: values[key] for key in names}) if names else con.execute(statement)
            made = re.search(r"(?:TEMP TABLE|TEMP MACRO|UPDATE|INSERT INTO|DELETE FROM)\s+\w+", statement)
            self.times.append((time.process_time() - cpu, name, made.group(0) if made else statement.split()[0]))

    def __enter__(self):
        from ctda_sql.core import sqlfiles, stages

        run_stage = stages.run_stage

        def stage(con, name, params, what="stage"):
            if not name.startswith(("crossrank/", "whatif/")):
                return run_stage(con, name, params, what)
            self.run(con, name, sqlfiles.parameterized_statements(sqlfiles.load(name)), params)

        self.saved = [(stages, "run_stage", run_stage)]
        stages.run_stage = stage
        return self

    def __exit__(self, *exc):
        for module, name, value in self.saved:
            setattr(module, name, value)

    def costliest(self, count: int) -> list[str]:
        return [f"  {cpu:7.2f}  {name:28s} {made}" for cpu, name, made in sorted(self.times, reverse=True)[:count]]


def cluster_apply(con, statement_times: StatementTimes | None = None) -> None:
    """sql/whatif/cluster_apply.sql after a coupled what-if, as `whatif --cluster` runs it once
    its stages are ready: every coupled collective's transfer 150 us (the simulated times are
    no input of its joins). The whole `whatif --cluster` is no measure of the statement: its
    coupled replay (warehouse/whatif/graph.py) iterates until the collectives' completions
    settle, and with transfers longer than measured that takes a round per collective of a
    chain (297 CPU s for the gloo shape at 32k)."""
    from ctda_sql.core import sqlfiles

    transfers = con.sql("SELECT run_id, pg, seq, 150.0 AS transfer_us FROM wi_coupled_groups").to_arrow_table()
    con.register("wi_cluster_transfers", transfers)
    try:
        statements = sqlfiles.parameterized_statements(sqlfiles.load("whatif/cluster_apply.sql"))
        (statement_times or StatementTimes()).run(con, "whatif/cluster_apply.sql", statements, {})
    finally:
        con.unregister("wi_cluster_transfers")


def timed_analyze(paths: list[Path], folder: Path, runs: int, extra: tuple[str, ...] = (),
                  statements: int = 0, changes: str = "unchanged",
                  coupled: bool = True) -> tuple[int, float, float, dict, list[str]]:
    """(events, median wall s, median CPU s, {extra: (wall s, CPU s)}, lines) of analyze
    --method all on a fresh ingest; extra "whatif" times a what-if of scenario `changes`
    (coupled or not) on the analysed database after the last run, and "cluster"
    cluster_apply.sql after it. With `statements`,
    the lines name the costliest statements of the last analyze's cross-rank stages and of
    the what-if."""
    from ctda_sql.core.connection import connect
    from ctda_sql.engine.analyze import analyze
    from ctda_sql.ingest.load import ingest

    db = folder / "growth.duckdb"
    con = connect(db)
    ingest(con, paths, run_name="growth", show_progress=False)
    events = con.execute("SELECT count(*) FROM events WHERE ph <> 'M'").fetchone()[0]
    walls, cpus, timed = [], [], {}
    statement_times = StatementTimes()
    for run in range(runs):
        with statement_times if statements and run == runs - 1 else contextlib.nullcontext():
            wall, cpu = cpu_timed(lambda: analyze(con, show_progress=False))
        walls.append(wall)
        cpus.append(cpu)
    with statement_times if statements else contextlib.nullcontext():
        if "whatif" in extra or "cluster" in extra:
            from ctda_sql.whatif.replay import whatif

            timed["whatif"] = cpu_timed(lambda: whatif(con, persist=False, scenario=scenario(changes),
                                                       coupled=coupled))
        if "cluster" in extra:
            timed["cluster_apply"] = cpu_timed(lambda: cluster_apply(con, statement_times if statements else None))
            timed["whatif_cluster"] = cpu_timed(lambda: whatif_cluster(con))
    con.close()
    db.unlink()
    return events, statistics.median(walls), statistics.median(cpus), timed, statement_times.costliest(statements)


def whatif_cluster(con) -> None:
    """The whole `whatif --cluster` of 2 hosts (a rank each) sharing a 0.4 Gbit/s link."""
    from ctda_sql.whatif.cluster import whatif_cluster as project
    from ctda_sql.whatif.cluster_file import check_cluster

    project(con, check_cluster({"cluster": {"hosts": 2, "devices_per_host": 1},
                                "inter_host": {"topology": "shared-link", "bandwidth_gbps": 0.4}}),
            name="bench_growth shared link")


def row(label: str, size: str, events: int, wall: float, cpu: float) -> list[str]:
    return [label, size, f"{events:,}", f"{wall:.2f}", f"{cpu:.2f}",
            f"{wall / events * 1e6:.1f}", f"{cpu / events * 1e6:.1f}"]


def print_rows(label: str, size: str, events: int, wall: float, cpu: float, timed: dict, lines: list[str]) -> None:
    print("  ".join(row(label, size, events, wall, cpu)), flush=True)
    for stage, (stage_wall, stage_cpu) in timed.items():
        print("  ".join(row(f"{label} {stage}", size, events, stage_wall, stage_cpu)), flush=True)
    if lines:
        print("\n".join(["  costliest statements, CPU s:", *lines]), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[8000, 32000, 128000])
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=SHAPES)
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 4, 16, 64])
    parser.add_argument("--rank-events", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=1, help="analyze runs per input (median)")
    parser.add_argument("--whatif", action="store_true", help="also time a coupled what-if (multi-rank shapes)")
    parser.add_argument("--cluster", action="store_true",
                        help="also time cluster_apply.sql after the what-if (multi-rank shapes)")
    parser.add_argument("--scenario", choices=SCENARIOS, default="unchanged",
                        help="the what-if's scenario: unchanged, scale (aten::add_, aten::mm, loader::* at 0.5) "
                             "or network (bandwidth x 0.5)")
    parser.add_argument("--uncoupled", action="store_true", help="replay each rank alone (no Python solver)")
    parser.add_argument("--statements", type=int, default=0, metavar="N",
                        help="print the N costliest statements of the cross-rank stages and the what-if")
    parser.add_argument("--code-dir", type=Path, default=REPO_DIR, help="the checkout whose engine runs")
    args = parser.parse_args()
    use_checkout(args.code_dir)
    import ctda_sql

    print(f"engine: {Path(ctda_sql.__file__).parent.parent}")
    headers = ["input", "N / ranks", "events", "analyze s", "CPU s", "us/event", "CPU us/event"]
    print("  ".join(headers), flush=True)
    extra = tuple(stage for stage, asked in (("whatif", args.whatif), ("cluster", args.cluster)) if asked)
    with tempfile.TemporaryDirectory(prefix="ctda-growth-") as work:
        folder = Path(work)
        for shape in args.shapes:
            for size in args.sizes:
                paths = shape_paths(shape, size, folder)
                print_rows(shape, str(size), *timed_analyze(paths, folder, args.runs,
                                                            extra if shape in WHATIF_SHAPES else (), args.statements,
                                                            args.scenario, not args.uncoupled))
                for path in paths:
                    path.unlink()
        for ranks in args.ranks:
            paths = [small_nodes_trace(args.rank_events, rank, ranks).write(folder / f"rank-{rank}.json")
                     for rank in range(ranks)]
            print_rows("ranks", str(ranks), *timed_analyze(paths, folder, args.runs))
            for path in paths:
                path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
