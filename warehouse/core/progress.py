"""Progress bars on stderr for long work (hidden when not asked for or not a terminal)."""

from __future__ import annotations

import sys
from contextlib import contextmanager


@contextmanager
def progress_bar(label: str, total: int, visible: bool = True):
    """Yield an `advance()` callable; draws a bar on stderr only when visible and a terminal
    (into a pipe or a log file a bar leaves only stray blank lines)."""
    if not (visible and sys.stderr.isatty()):
        yield lambda: None
        return
    # rich costs ~0.05 s to import: only when a bar is drawn
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


# a single file's parse shows its stages once it has taken this long (CTDA_PROGRESS_DELAY_S
# overrides it: the tests set 0)
STAGE_DELAY_S = 1.0


@contextmanager
def stage_bar(label: str, visible: bool = True):
    """Yield `stage(name, size_bytes)`. Work that outlasts STAGE_DELAY_S shows, on stderr,
    `label: name (123.4 MB)` with a spinner and the time taken, so one big file never leaves
    a blank screen. Only when visible and a terminal; gone when the work ends."""
    import os
    import threading

    if not (visible and sys.stderr.isatty()):
        yield lambda name, size: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task(label, total=None)
    lock, state = threading.Lock(), {"done": False}

    def start() -> None:
        with lock:  # never start a bar the work has already ended
            if not state["done"]:
                bar.start()

    delay_s = float(os.environ.get("CTDA_PROGRESS_DELAY_S", STAGE_DELAY_S))
    timer = threading.Timer(delay_s, start)
    timer.daemon = True
    if delay_s > 0:
        timer.start()
    else:
        start()
    try:
        # drawn at once: a stage shorter than rich's refresh interval is still seen
        yield lambda name, size: bar.update(task, description=f"{label}: {name} ({_megabytes(size)})",
                                            refresh=True)
    finally:
        with lock:
            state["done"] = True
            timer.cancel()
            bar.stop()


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"
