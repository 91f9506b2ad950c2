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
