"""Open the warehouse database: path resolution, schema, macros and UDFs on every connection."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import duckdb

from . import sqlfiles
from .errors import CtdaError

DEFAULT_DB = "ctda.duckdb"
# DuckDB's default (80% of RAM) lets analyze of a 16 x 500k-event job peak at 4.2 GB RSS;
# at 2 GB it spills the rest, peaks at 2.1 GB and runs no slower (bench/RESULTS.md).
DEFAULT_MEMORY_LIMIT = "2GB"
_MEMORY_SIZE = re.compile(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)


def resolve_db_path(cli_value: str | None = None) -> Path:
    """--db FILE, else $CTDA_DB, else ./ctda.duckdb."""
    return Path(cli_value or os.environ.get("CTDA_DB") or DEFAULT_DB)


def connect(path: Path | str, read_only: bool = False, for_sql: str | None = None,
            safe: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (creating when writable) the database at `path` with schema, macros and UDFs.

    for_sql: the SQL a one-shot command will run; only the UDFs it names are registered
    (udfs.register_named_in). None registers them all, for sessions that run any SQL.
    safe: SQL can reach no file but the warehouse itself (see lock_out_files)."""
    path = Path(path)
    if read_only and str(path) != ":memory:" and not path.exists():
        raise CtdaError(f"no database at {path}; run `ctda-sql ingest` first")
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        raise CtdaError(_open_problem(path, exc)) from None
    # our own progress bars only; DuckDB's would interleave with command output
    con.execute("SET enable_progress_bar = false")
    _limit_memory(con)
    if not read_only:
        _create_schema(con, path)
    _run_folder(con, "macros")
    _register_udfs(con, for_sql)
    if safe:
        lock_out_files(con)
    return con


def lock_out_files(con: duckdb.DuckDBPyConnection) -> None:
    """No reading or writing of other files from SQL (COPY, EXPORT DATABASE, read_csv, ATTACH,
    INSTALL ...), and no SET can turn it back on: for warehouses shared with others."""
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _create_schema(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Tables and views, unless the database already has this version of them: a writable
    open that changes nothing must leave the file's bytes alone (CREATE OR REPLACE VIEW
    rewrote them on every open, even for a command that then failed)."""
    fingerprint = _schema_fingerprint()
    if _stored_fingerprint(con) == fingerprint:
        return
    sqlfiles.execute(con, "schema.sql")
    _refuse_old_layout(con, path)
    _run_folder(con, "schema")
    # the fingerprint is hex made here, never user text; COMMENT ON takes no parameters
    con.execute(f"COMMENT ON TABLE runs IS '{fingerprint}'")


def _schema_fingerprint() -> str:
    files = ["schema.sql"] + [f"schema/{name}" for name in sqlfiles.names("schema")]
    digest = hashlib.sha256("\0".join(sqlfiles.load(name) for name in files).encode())
    return f"ctda-sql schema {digest.hexdigest()[:16]}"


def _stored_fingerprint(con: duckdb.DuckDBPyConnection) -> str | None:
    row = con.execute(
        "SELECT comment FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = 'runs'").fetchone()
    return row[0] if row else None


def _limit_memory(con: duckdb.DuckDBPyConnection) -> None:
    """$CTDA_MEMORY_LIMIT, else 2GB; validated before it reaches SQL (SET takes no parameters)."""
    limit = (os.environ.get("CTDA_MEMORY_LIMIT") or DEFAULT_MEMORY_LIMIT).strip()
    if not _MEMORY_SIZE.fullmatch(limit):
        raise CtdaError(f"CTDA_MEMORY_LIMIT={limit!r} is not a memory size like 2GB or 512MB")
    con.execute(f"SET memory_limit = '{limit}'")


def _refuse_old_layout(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Databases from before events.end_us became generated would get NULL end_us on ingest."""
    stored_end = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'events' "
        "AND column_name = 'end_us' AND is_generated = 'NEVER'").fetchone()[0]
    if stored_end:
        con.close()
        raise CtdaError(f"{path} was made by an older ctda-sql (events.end_us is stored); "
                        "ingest the traces into a new database file")


def _open_problem(path: Path, exc: Exception) -> str:
    message = str(exc)
    if "lock" in message.lower():
        return f"database {path} is locked by another process (close it, or open it with --read-only)"
    return f"cannot open database {path}: {message.splitlines()[0]}"


def _run_folder(con: duckdb.DuckDBPyConnection, folder: str) -> None:
    try:
        names = sqlfiles.names(folder)
    except FileNotFoundError:
        return
    for name in names:
        sqlfiles.execute(con, f"{folder}/{name}")


def _register_udfs(con: duckdb.DuckDBPyConnection, for_sql: str | None) -> None:
    from udfs import register_all, register_named_in

    if for_sql is None:
        register_all(con)
    else:
        register_named_in(con, for_sql)
