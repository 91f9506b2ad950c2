"""Open the warehouse database: path resolution, schema, macros and UDFs on every connection."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from . import sqlfiles
from .errors import CtdaError

DEFAULT_DB = "ctda.duckdb"


def resolve_db_path(cli_value: str | None = None) -> Path:
    """--db FILE, else $CTDA_DB, else ./ctda.duckdb."""
    return Path(cli_value or os.environ.get("CTDA_DB") or DEFAULT_DB)


def connect(path: Path | str, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (creating when writable) the database at `path` with schema, macros and UDFs."""
    path = Path(path)
    if read_only and str(path) != ":memory:" and not path.exists():
        raise CtdaError(f"no database at {path}; run `ctda-sql ingest` first")
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        raise CtdaError(_open_problem(path, exc)) from None
    # our own progress bars only; DuckDB's would interleave with command output
    con.execute("SET enable_progress_bar = false")
    if not read_only:
        _run_file(con, "schema.sql")
        _run_folder(con, "schema")
    _run_folder(con, "macros")
    _register_udfs(con)
    return con


def _open_problem(path: Path, exc: Exception) -> str:
    message = str(exc)
    if "lock" in message.lower():
        return f"database {path} is locked by another process (close it, or open it with --read-only)"
    return f"cannot open database {path}: {message.splitlines()[0]}"


def _run_file(con: duckdb.DuckDBPyConnection, name: str) -> None:
    for statement in sqlfiles.statements(sqlfiles.load(name)):
        con.execute(statement)


def _run_folder(con: duckdb.DuckDBPyConnection, folder: str) -> None:
    try:
        names = sqlfiles.names(folder)
    except FileNotFoundError:
        return
    for name in names:
        _run_file(con, f"{folder}/{name}")


def _register_udfs(con: duckdb.DuckDBPyConnection) -> None:
    from udfs import register_all

    register_all(con)
