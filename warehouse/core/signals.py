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


_sigint_seen = False


def watch_sigint() -> None:
    """From now on Ctrl-C raises KeyboardInterrupt as usual and is also remembered, so that
    an error DuckDB made out of it (it wraps the KeyboardInterrupt of a Python callback in
    errors of its own) is still known for an interruption."""
    global _sigint_seen
    _sigint_seen = False
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _remember_and_interrupt)


def sigint_seen() -> bool:
    """Whether Ctrl-C came since watch_sigint."""
    return _sigint_seen


def _remember_and_interrupt(signum, frame):
    global _sigint_seen
    _sigint_seen = True
    raise KeyboardInterrupt


def stop_watching_sigint() -> None:
    """Python's own Ctrl-C handling again (for the interactive shell)."""
    global _sigint_seen
    _sigint_seen = False
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
