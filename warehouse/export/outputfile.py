"""The output file of `ctda-sql export`: checked before any work, written whole or not at all.

An export never writes over the warehouse it reads (the database file, its WAL, or anything
in a lake folder), and writes to a temporary file beside the output that is renamed over it
once complete: a full disk or an interrupted export leaves the previous report as it was."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from ctda_sql.core.errors import CtdaError
from ctda_sql.lake.store import RUNS_FILE as LAKE_MARKER  # the file every lake folder holds


def check_output_path(con, path: Path) -> None:
    """Refuse an output that is a folder, sits in no folder, or is one of the warehouse's own
    files: the connection's database files and their WALs, or anything inside a lake (a
    folder holding the lake's runs.parquet, at any depth above the output)."""
    if path.is_dir():
        raise CtdaError(f"{path}: is a folder; give a file name")
    if not path.parent.is_dir():
        raise CtdaError(f"{path.parent}: no such folder")
    target = path.resolve()
    for row in con.execute("SELECT path FROM duckdb_databases() WHERE path IS NOT NULL AND path <> ''").fetchall():
        database = Path(row[0]).resolve()
        if target == database:
            raise CtdaError(f"{path}: is the warehouse database; choose another output file")
        if target == database.with_name(database.name + ".wal"):
            raise CtdaError(f"{path}: is the warehouse's write-ahead log; choose another output file")
    lake = next((folder for folder in target.parents if (folder / LAKE_MARKER).is_file()), None)
    if lake is not None:
        raise CtdaError(f"{path}: is inside the lake {lake}; choose an output outside it")


@contextlib.contextmanager
def atomic_output(path: Path):
    """Yield a temporary file beside `path`; rename it over `path` when the block succeeds,
    remove it when it fails. OS errors become one error line."""
    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise CtdaError(f"{path}: cannot write there ({exc.strerror or exc})") from None
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes it 0600; a report is an ordinary file
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise CtdaError(f"{path}: could not be written ({exc.strerror or exc}); "
                        "anything there before is unchanged") from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
