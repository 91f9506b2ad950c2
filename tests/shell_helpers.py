"""Helpers for the shell and CLI tests: a small trace file, the ctda-sql command line."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ctda_sql.testing.tracebuilder import TraceBuilder


def write_trace(folder: Path, name: str = "train", rank: int = 0, world_size: int = 1) -> Path:
    """A one-step trace with a CPU op, a launch and its kernel; `name` makes its content unique."""
    builder = TraceBuilder(rank=rank, world_size=world_size)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=100)
    builder.cpu_op(main, "aten::relu", ts=10, dur=20)
    builder.cpu_op(main, f"op_of_{name}", ts=40, dur=5)  # distinct files, not re-loads of one
    builder.launch(main, ts=50, dur=5, kernel="relu_kernel", stream=7, kernel_ts=60, kernel_dur=30)
    return builder.write(folder / f"{name}.json")


def ctda_command() -> list[str]:
    """How to start ctda-sql in a subprocess: the installed script, else the module."""
    executable = shutil.which("ctda-sql")
    return [executable] if executable else [sys.executable, "-m", "ctda_sql.shell.entry"]
