"""One transaction per command, and what Ctrl-C inside it means.

DuckDB reports a Ctrl-C inside a query as RuntimeError("Query interrupted") or as
duckdb.InterruptException rather than KeyboardInterrupt; `is_interruption` recognizes all
three. An interruption inside `transaction` is re-raised as `Interrupted`, which says
whether the work was saved: a Ctrl-C landing just after COMMIT finds no transaction left
to roll back, and the command then says its work was saved instead of failing."""

from __future__ import annotations

from contextlib import contextmanager

import duckdb

from ctda_sql.core.signals import sigint_deferred, sigint_seen

_QUERY_INTERRUPTED = "Query interrupted"
# whether a transaction of this command committed: a Ctrl-C after the block says so too
_committed = False


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a command's transaction; `saved` tells whether its COMMIT went through."""

    def __init__(self, saved: bool):
        super().__init__("interrupted after the work was saved" if saved
                         else "interrupted; the database is unchanged")
        self.saved = saved


def forget_commits() -> None:
    """Start of a command: nothing it did is saved yet."""
    global _committed
    _committed = False


def work_saved() -> bool:
    """Whether a transaction of the current command has committed."""
    return _committed


def interrupted_message(exc: BaseException) -> str:
    """The one line printed for a Ctrl-C that stopped a command."""
    if isinstance(exc, Interrupted):
        return str(exc)
    return str(Interrupted(saved=work_saved()))


def is_interruption(exc: BaseException) -> bool:
    """Ctrl-C, however it surfaced: in Python, inside a DuckDB query, or as any error raised
    after one was seen (DuckDB wraps it, e.g. 'reading the schema ... failed: KeyboardInterrupt')."""
    if sigint_seen() or isinstance(exc, (KeyboardInterrupt, duckdb.InterruptException)):
        return True
    return isinstance(exc, RuntimeError) and str(exc).strip() == _QUERY_INTERRUPTED


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection):
    """BEGIN, then COMMIT when the block ends; on any failure ROLLBACK and re-raise
    (an interruption as `Interrupted`, saying whether the COMMIT had gone through)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        _commit(con)
        _note_commit(True)
    except BaseException as exc:
        with sigint_deferred(raise_at_end=False) as ctrl_c:  # a second Ctrl-C waits for ROLLBACK
            saved = not _rolled_back(con)
        _note_commit(saved)
        if is_interruption(exc) or ctrl_c:
            raise Interrupted(saved) from None
        raise


def _note_commit(saved: bool) -> None:
    global _committed
    _committed = _committed or saved


def _commit(con) -> None:
    con.execute("COMMIT")


def _rolled_back(con) -> bool:
    """ROLLBACK; False when no transaction was active (the COMMIT had gone through)."""
    try:
        con.execute("ROLLBACK")
    except duckdb.TransactionException:
        return False
    return True
