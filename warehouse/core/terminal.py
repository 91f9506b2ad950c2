"""Whether output goes to a person: tables, pagers and progress bars are for terminals only."""

from __future__ import annotations


def is_tty(stream) -> bool:
    """True for a terminal; False for a pipe, a file, or a stream that is closed or has no
    isatty (pytest's capture, a StringIO)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
