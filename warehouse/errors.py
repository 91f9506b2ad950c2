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
