"""Open the warehouse database: path resolution, schema, macros and UDFs on every connection."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import duckdb

from ctda_sql.core import column_docs, sqlfiles
from ctda_sql.core.errors import CtdaError, first_line

DEFAULT_DB = "ctda.duckdb"
# New database files use this storage format, so DuckDB 1.4 and 1.5 (the CLI and pandas users
# may still have) open them as well as DuckDB 2.0; DuckDB keeps a file's format as it grows.
STORAGE_VERSION = "v1.4.0"
# DuckDB's default (80% of RAM) lets a large analyze peak far above the 2 GB the project
# allows; at 1.5 GB it spills the rest and runs no slower (docs/decisions/0009).
DEFAULT_MEMORY_LIMIT = "1.5GB"
_MEMORY_SIZE = re.compile(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)


def duckdb_path(path: Path | str) -> str:
    """`path` as DuckDB's file readers take it literally: they expand * ? [ ] in every path
    they are given (a lake under exp[1]/ found no file), so each of those is written as a
    class of one character ([[] for [)."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in str(path))


def resolve_db_path(cli_value: str | None = None) -> Path:
    """--db FILE, else $CTDA_DB, else `database` of the settings file, else ./ctda.duckdb."""
    from ctda_sql.core.config import load_config

    if cli_value or os.environ.get("CTDA_DB"):
        return Path(cli_value or os.environ["CTDA_DB"])
    configured = load_config().database
    return Path(configured).expanduser() if configured else Path(DEFAULT_DB)


def existing_db_path(cli_value: str | None = None) -> Path:
    """resolve_db_path's answer for commands that read what ingest made (analyze, whatif,
    advise, diff): a missing file is an error, not a new empty database left behind."""
    path = resolve_db_path(cli_value)
    require_database(path)
    return path


def require_database(path: Path) -> None:
    """A CtdaError when no database file is at `path` (what reading a database needs)."""
    if not path.exists():
        raise CtdaError(f"no database at {path}; run `ctda-sql ingest` first")


def connect(path: Path | str, read_only: bool = False, for_sql: str | None = None,
            safe: bool = False, macros_for: str | None = None,
            scratch: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (creating when writable) the database at `path` with schema, macros and UDFs.

    for_sql: the SQL a one-shot command will run; only the UDFs it names are registered
    (udfs.register_named_in). None registers them all, for sessions that run any SQL.
    safe: SQL can reach no file but the warehouse itself (see lock_out_files).
    macros_for: the only SQL the connection will run (a one-shot query or report); only the
    macros and views it needs are made (see macro_statements). None makes them all.
    scratch: an in-memory warehouse that nobody browses (a lake task's, or a one-shot
    command's over a lake): its tables get no COMMENTs (~0.1 s of the ~0.15 s its schema costs)."""
    path = Path(path)
    if scratch and str(path) != ":memory:":
        raise ValueError("only an in-memory warehouse can be a scratch one")
    if read_only and str(path) != ":memory:":
        require_database(path)
    try:
        con = duckdb.connect(str(path), read_only=read_only, config=_new_file_config(path, read_only))
    except duckdb.IOException as exc:
        raise CtdaError(_open_problem(path, exc)) from None
    # our own progress bars only; DuckDB's would interleave with command output
    con.execute("SET enable_progress_bar = false")
    _limit_memory(con)
    _create_schema_and_macros(con, path, read_only, macros_for, describe=not scratch)
    _register_udfs(con, for_sql)
    if safe:
        lock_out_files(con)
    return con


def _create_schema_and_macros(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool,
                              macros_for: str | None = None, describe: bool = True) -> None:
    """The warehouse tables (created or checked when writable), then the temporary macros."""
    if not read_only:
        _create_schema(con, path, describe)
    if macros_for is None:
        _run_folder(con, "macros")
    else:
        needed = macro_statements(macros_for)
        if needed:
            con.execute(needed)


# Every statement of sql/macros starts a line with this (tests/unit/test_macros_lazy.py checks it).
_MACRO_START = re.compile(r"^CREATE OR REPLACE TEMP (?:MACRO|VIEW) ([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=None)
def _macro_definitions() -> tuple[tuple[str, str, frozenset[str]], ...]:
    """(name, CREATE statement, lower-case words of its text) for each macro and view of
    sql/macros, in the order the files run them (a view binds the macros above it)."""
    definitions = []
    for file_name in sqlfiles.names("macros"):
        text = sqlfiles.load(f"macros/{file_name}")
        starts = list(_MACRO_START.finditer(text))
        for start, following in zip(starts, starts[1:] + [None]):
            statement = text[start.start():following.start() if following else len(text)]
            words = frozenset(w.lower() for w in _WORD.findall(statement))
            definitions.append((start[1].lower(), statement, words))
    return tuple(definitions)


def sql_of_folders(*folders: str) -> str:
    """The text of every .sql file in these folders of sql/: what a command that runs only
    them passes as macros_for."""
    return "\n".join(sqlfiles.load(f"{folder}/{name}") for folder in folders for name in sqlfiles.names(folder))


def macro_statements(sql: str) -> str:
    """The CREATE statements of the macros and views `sql` names, and of those they name in
    turn, in file order: making all 45 costs ~0.1 s, most of opening a warehouse for a
    one-shot query. A name that only appears in a string or comment costs one extra macro."""
    definitions = _macro_definitions()
    defined = {name: words for name, _, words in definitions}
    wanted = {w.lower() for w in _WORD.findall(sql)} & defined.keys()
    pending = list(wanted)
    while pending:
        for word in defined[pending.pop()] & defined.keys():
            if word not in wanted:
                wanted.add(word)
                pending.append(word)
    return "".join(statement for name, statement, _ in definitions if name in wanted)


def _new_file_config(path: Path, read_only: bool) -> dict[str, str | bool | int | float | list[str]]:
    if read_only or str(path) == ":memory:" or path.exists():
        return {}
    return {"storage_compatibility_version": STORAGE_VERSION}


def lock_out_files(con: duckdb.DuckDBPyConnection, allowed: Path | None = None,
                   allowed_folder: Path | None = None) -> None:
    """No reading or writing of other files from SQL (COPY, EXPORT DATABASE, read_csv, ATTACH,
    INSTALL ...), and no SET can turn it back on: for warehouses shared with others.

    allowed: the one database file a session may still attach (with its write-ahead log).
    allowed_folder: the one folder whose files SQL may still read (a Parquet lake)."""
    if allowed is not None:
        paths = [str(allowed), f"{allowed}.wal", f"{allowed}.wal.checkpoint"]
        con.execute("SET allowed_paths = ?", [paths])
    if allowed_folder is not None:
        # DuckDB checks the path it is given as well as each file it finds: the lake's views
        # give the folder escaped (duckdb_path) where its name holds * ? [ ]
        folders = sorted({str(allowed_folder) + os.sep, duckdb_path(allowed_folder) + os.sep})
        con.execute("SET allowed_directories = ?", [folders])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _create_schema(con: duckdb.DuckDBPyConnection, path: Path, describe: bool = True) -> None:
    """Tables, views and column comments, unless the database already has this version of
    them: a writable open that changes nothing must leave the file's bytes alone (CREATE OR
    REPLACE VIEW would rewrite them on every open, even for a command that then fails)."""
    fingerprint = _schema_fingerprint()
    if _stored_fingerprint(con) == fingerprint:
        return
    # one transaction: ~200 COMMENT statements committed one by one would cost a new
    # database's first ingest several times what they cost together
    con.execute("BEGIN TRANSACTION")
    sqlfiles.execute(con, "schema.sql")
    _refuse_old_layout(con, path)
    _run_folder(con, "schema")
    if describe:
        _describe_tables(con)
    con.execute("DELETE FROM schema_version")
    con.execute("INSERT INTO schema_version VALUES (?)", [fingerprint])
    con.execute("COMMIT")


def _schema_fingerprint() -> str:
    files = column_docs.schema_files()  # the descriptions too: a changed one is set on open
    digest = hashlib.sha256("\0".join(sqlfiles.load(name) for name in files).encode())
    return f"ctda-sql schema {digest.hexdigest()[:16]}"


def _stored_fingerprint(con: duckdb.DuckDBPyConnection) -> str | None:
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = 'schema_version'").fetchall()[0][0]
    if not exists:
        return None
    row = con.execute("SELECT any_value(fingerprint) FROM schema_version").fetchone()
    return row[0] if row else None


def _limit_memory(con: duckdb.DuckDBPyConnection) -> None:
    """$CTDA_MEMORY_LIMIT, else DEFAULT_MEMORY_LIMIT; validated before it reaches SQL (SET takes no parameters)."""
    limit = (os.environ.get("CTDA_MEMORY_LIMIT") or DEFAULT_MEMORY_LIMIT).strip()
    if not _MEMORY_SIZE.fullmatch(limit):
        raise CtdaError(f"CTDA_MEMORY_LIMIT={limit!r} is not a memory size like 2GB or 512MB")
    con.execute(f"SET memory_limit = '{limit}'")


# Tables whose columns are not all the schema files': `meta load` re-creates experiments with the
# user's columns, which have no description, and drops the table's own (it gives the table and
# its key `run` theirs back); checking it would report the user's columns after every load.
USER_COLUMNS_TABLES = ("experiments",)


def public_tables() -> tuple[str, ...]:
    """The tables of the schema files whose every column is described there."""
    return tuple(table for table in column_docs.schema_docs() if table not in USER_COLUMNS_TABLES)


def _describe_tables(con: duckdb.DuckDBPyConnection) -> None:
    """COMMENT ON every table and column of the schema files, with the texts written beside
    their definitions. Only a new database or a changed schema (its fingerprint) gets here, so
    an older database gains new and changed descriptions, and an open that changes nothing
    writes nothing."""
    column_docs.describe_tables(con)


def undescribed_columns(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(table, column) of the public tables that have no comment; '' is the table itself."""
    return con.execute(sqlfiles.load("undescribed_columns.sql"), [list(public_tables())]).fetchall()


def _refuse_old_layout(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Databases from before events.end_us became generated would get NULL end_us on ingest."""
    stored_end = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'events' "
        "AND column_name = 'end_us' AND is_generated = 'NEVER'").fetchall()[0][0]
    if stored_end:
        con.close()
        raise CtdaError(f"{path} was made by an older ctda-sql (events.end_us is stored); "
                        "ingest the traces into a new database file")


# DuckDB names the process holding the lock: "Conflicting lock is held in /usr/bin/python3 (PID 123)"
_LOCK_HOLDER = re.compile(r"lock is held in (?P<program>.*?) \(PID (?P<pid>\d+)\)")


def _open_problem(path: Path, exc: Exception) -> str:
    message = str(exc)
    if "lock" in message.lower():
        return lock_message(path, message)
    return f"cannot open database {path}: {first_line(exc)}"


def lock_message(path: Path, duckdb_message: str) -> str:
    """Who holds the database and what to do: ctda-sql holds it only while it writes."""
    holder = _LOCK_HOLDER.search(duckdb_message)
    who = (f"process {holder['pid']} ({Path(holder['program']).name})" if holder
           else "another process")
    return (f"database {path} is in use by {who}, which is writing to it or keeps it open; "
            "retry when its ingest, analyze or statement has finished (a ctda-sql shell holds "
            "the file only while a statement runs), or close the program that keeps it open")


# ---- shell sessions: the file attached only while a statement runs ---------------------------

WAREHOUSE = "warehouse"


def open_session(path: Path | str, read_only: bool = False,
                 safe: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory connection for a long session (the shell) that attaches the database
    file only around each statement (`attached`), so an idle session locks nobody out.
    safe: SQL can reach no file but this database (see lock_out_files).

    The schema is created (writable sessions) and the temporary macros and views are made
    once, while the file is attached; temporary tables and settings live in the session."""
    path = Path(path)
    if str(path) == ":memory:":
        raise CtdaError("a shell session needs a database file")
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    try:
        _limit_memory(con)
        prepare_session(con, path, read_only)
    except BaseException:
        con.close()
        raise
    _register_udfs(con, None)
    if safe:
        lock_out_files(con, allowed=path)
    return con


def prepare_session(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool = False) -> None:
    """Make `path` ready for a session on `con`: the schema (created when writable) and the
    session's temporary macros and views, which bind to whichever file is attached."""
    if read_only:
        require_database(path)
    with attached(con, path, write=not read_only):
        _create_schema_and_macros(con, path, read_only)


@contextmanager
def attached(con: duckdb.DuckDBPyConnection, path: Path, write: bool = False) -> Iterator[None]:
    """The database file attached (read-only unless `write`) and in use while the block runs."""
    options = "" if write else " (READ_ONLY)"
    if write and not path.exists():
        options = f" (STORAGE_VERSION '{STORAGE_VERSION}')"
    try:
        con.execute(f"ATTACH ? AS {WAREHOUSE}{options}", [str(path)])
    except duckdb.IOException as exc:
        raise CtdaError(_open_problem(path, exc)) from None
    try:
        con.execute(f"USE {WAREHOUSE}")
        yield
    finally:
        _detach(con)


def _detach(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("USE memory")
        con.execute(f"DETACH {WAREHOUSE}")
    except duckdb.Error:  # a transaction left open by the statement: end it, then let go
        con.execute("ROLLBACK")
        con.execute("USE memory")
        con.execute(f"DETACH {WAREHOUSE}")


def _run_folder(con: duckdb.DuckDBPyConnection, folder: str) -> None:
    try:
        names = sqlfiles.names(folder)
    except FileNotFoundError:
        return
    for name in names:
        sqlfiles.execute(con, f"{folder}/{name}")


def _register_udfs(con: duckdb.DuckDBPyConnection, for_sql: str | None) -> None:
    from ctda_sql.udfs import register_all, register_named_in

    if for_sql is None:
        register_all(con)
    else:
        register_named_in(con, for_sql)
