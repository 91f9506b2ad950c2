"""How analyze's cost grows with the work (issue 32): cost per event of `analyze --method all`
for one step whose CPU node holds N events, and for 1 .. 64 ranks of one job.

Shapes (each one step on the main thread, written with ctda_sql.tracebuilder):
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
  ranks        R rank files of one run, each a small_nodes step of --rank-events events

Cost per event = analyze's wall time / the trace's events (CPU seconds beside it: the machine
is shared, and CPU time moves less). Ingest is not counted. The before/after comparison runs
this script twice, once with --code-dir pointing at a checkout of the code before a change
(`git worktree add /tmp/before COMMIT`); a checkout from before the one-package layout (issue
36) runs with its own copy of this script.

Usage: python bench/bench_growth.py [--sizes 8000 32000 128000] [--shapes nested overlapping
       small_nodes python_frames syncs] [--ranks 1 4 16 64] [--rank-events 4000] [--runs 1] [--code-dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from run_checkout import use_checkout  # bench/ is the script's folder, first on sys.path

REPO_DIR = Path(__file__).resolve().parent.parent
SHAPES = ("nested", "overlapping", "small_nodes", "python_frames", "syncs")


def _builder(rank: int = 0, world_size: int | None = None):
    from ctda_sql.tracebuilder import TraceBuilder

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


def small_nodes_trace(events: int, rank: int = 0, world_size: int | None = None, frames: bool = False):
    """One step, N/3 ops 10 us apart, each launching a 4 us kernel; streams 7 and 8 alternate
    every 4 ops, so each run of 4 ops is a CPU node of its own with a GPU node. With `frames`,
    N/4 ops, each inside an 8 us python frame of its own (the op shrinks to 6 us inside it)."""
    builder = _builder(rank, world_size)
    main = builder.thread(100, "pt_main_thread")
    builder.stream(7)
    builder.stream(8)
    ops = max(1, events // (4 if frames else 3))
    builder.step(1, main, ts=0, dur=ops * 10 + 20)
    for i in range(ops):
        start = 5 + i * 10
        if frames:
            builder.python_function(main, f"model.py({i % 50}): forward", ts=start, dur=8)
        builder.cpu_op(main, "aten::mul", ts=start + frames, dur=8 - 2 * frames)
        builder.launch(main, ts=start + 1 + frames, dur=3, kernel="mul_kernel", stream=7 + (i // 4) % 2,
                       kernel_ts=start + 6, kernel_dur=4)
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


def shape_trace(shape: str, events: int):
    if shape == "syncs":
        return syncs_trace(events)
    if shape == "small_nodes":
        return small_nodes_trace(events)
    if shape == "python_frames":
        return small_nodes_trace(events, frames=True)
    return nested_trace(events, overlap=shape == "overlapping")


def timed_analyze(paths: list[Path], folder: Path, runs: int) -> tuple[int, float, float]:
    """(events, median wall s, median CPU s) of analyze --method all on a fresh ingest."""
    from ctda_sql.engine.analyze import analyze
    from ctda_sql.core.connection import connect
    from ctda_sql.ingest.load import ingest

    db = folder / "growth.duckdb"
    con = connect(db)
    ingest(con, paths, run_name="growth", show_progress=False)
    events = con.execute("SELECT count(*) FROM events WHERE ph <> 'M'").fetchone()[0]
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        analyze(con, show_progress=False)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    con.close()
    db.unlink()
    return events, statistics.median(walls), statistics.median(cpus)


def row(label: str, size: str, events: int, wall: float, cpu: float) -> list[str]:
    return [label, size, f"{events:,}", f"{wall:.2f}", f"{cpu:.2f}",
            f"{wall / events * 1e6:.1f}", f"{cpu / events * 1e6:.1f}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[8000, 32000, 128000])
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=SHAPES)
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 4, 16, 64])
    parser.add_argument("--rank-events", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=1, help="analyze runs per input (median)")
    parser.add_argument("--code-dir", type=Path, default=REPO_DIR, help="the checkout whose engine runs")
    args = parser.parse_args()
    use_checkout(args.code_dir)
    import ctda_sql

    print(f"engine: {Path(ctda_sql.__file__).parent.parent}")
    headers = ["input", "N / ranks", "events", "analyze s", "CPU s", "us/event", "CPU us/event"]
    print("  ".join(headers), flush=True)
    with tempfile.TemporaryDirectory(prefix="ctda-growth-") as work:
        folder = Path(work)
        for shape in args.shapes:
            for size in args.sizes:
                trace = shape_trace(shape, size).write(folder / "trace.json")
                print("  ".join(row(shape, str(size), *timed_analyze([trace], folder, args.runs))), flush=True)
        for ranks in args.ranks:
            paths = [small_nodes_trace(args.rank_events, rank, ranks).write(folder / f"rank-{rank}.json")
                     for rank in range(ranks)]
            print("  ".join(row("ranks", str(ranks), *timed_analyze(paths, folder, args.runs))), flush=True)
            for path in paths:
                path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
