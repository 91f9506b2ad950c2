"""Hand-made pairs of runs that differ by one part (tests/advice/test_path_diff.py derives their diffs)."""

from __future__ import annotations

from ctda_sql.testing.tracebuilder import TraceBuilder

STEPS = 3


def training_trace(data_loading_us: float = 0, compute_us: float = 4000, item_us: float = 0,
                   loader_stall_us: float = 0) -> TraceBuilder:
    """STEPS identical steps on the main thread: a data_loading annotation with nothing inside
    (a sleep), or a wait with no annotation while a loader thread runs `loader_stall`; a
    `compute` annotation around one op, an op outside every annotation (`aten::item`), the
    optimizer. Leaving a part out keeps every other time the same, so a pair differs by that
    part alone."""
    b = TraceBuilder(rank=0)
    main, loader = b.thread(100, "pt_main_thread"), b.thread(300, "loader")
    data_loading_us = data_loading_us or loader_stall_us
    step_us = 10 + data_loading_us + 10 + compute_us + 10 + item_us + 10 + 300 + 20
    for number in range(1, STEPS + 1):
        t = (number - 1) * step_us
        b.step(number, main, ts=t, dur=step_us)
        t += 10
        if loader_stall_us:
            b.annotation(loader, "loader_stall", ts=t, dur=loader_stall_us)
        elif data_loading_us:
            b.annotation(main, "data_loading", ts=t, dur=data_loading_us)
        t += data_loading_us + 10
        b.annotation(main, "compute", ts=t, dur=compute_us)
        b.cpu_op(main, "aten::mm", ts=t + 5, dur=compute_us - 10)
        t += compute_us + 10
        if item_us:
            b.cpu_op(main, "aten::item", ts=t, dur=item_us)
        t += item_us + 10
        b.annotation(main, "Optimizer.step#SGD.step", ts=t, dur=300)
        b.cpu_op(main, "aten::add_", ts=t + 10, dur=280)
    return b
