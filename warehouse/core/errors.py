"""Errors meant for the user: printed as one line, never as a traceback."""


class CtdaError(Exception):
    """A problem the user can act on; str() is the whole message."""


class BadTraceError(CtdaError):
    """A trace file that cannot be ingested."""

    def __init__(self, path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self):
        # keep (path, problem) when the error crosses a process-pool boundary
        return (BadTraceError, (self.path, self.problem))


# DuckDB's suggestions, on the lines after its message: kept, they are the fix
_HINT_PREFIXES = ("Did you mean", "Candidate bindings", "Candidate tables", "HINT:")


def first_line(exc: BaseException) -> str:
    """The error as one line: its first line, with DuckDB's hints ('Did you mean "events"?')."""
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    if not lines or not lines[0]:
        return type(exc).__name__
    hints = [line for line in lines[1:] if line.startswith(_HINT_PREFIXES)]
    return " ".join([lines[0], *hints])


def position_lines(exc: BaseException) -> list[str]:
    """DuckDB's 'LINE n: ...' line and the caret line under it, when the error has them."""
    lines = str(exc).splitlines()
    for index, line in enumerate(lines):
        if line.startswith("LINE ") and index + 1 < len(lines):
            return [line, lines[index + 1]]
    return []
