"""Ctrl-C held back over work that a KeyboardInterrupt would break. Imports nothing heavy,
so the console entry can hold Ctrl-C while it loads DuckDB (an interrupt inside DuckDB's
import surfaces as an ImportError with a traceback)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


@contextmanager
def sigint_deferred(raise_at_end: bool = True):
    """Inside the block Ctrl-C is only noted (in the list it yields); it is raised as
    KeyboardInterrupt when the block ends, unless raise_at_end is False."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received  # only the main thread may set signal handlers (and only it gets SIGINT)
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and raise_at_end:
            raise KeyboardInterrupt
