"""Experiment metadata: `meta load` files keyed by run name, and --meta pairs as columns.

`experiments` is a typed table (run + the file's columns). Re-loading re-creates it as the
union of old and new rows and columns, new values winning per run. `run_meta` is a view with
one column per runs.meta key, re-created by `refresh_run_meta` after ingest.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from ctda_sql.core import column_docs, sqlfiles
from ctda_sql.core.connection import duckdb_path
from ctda_sql.core.errors import CtdaError
from ctda_sql.core.quoting import quote_identifier, quote_literal

_READERS = {".csv": "read_csv", ".json": "read_json_auto", ".parquet": "read_parquet"}


def load_experiments(con: duckdb.DuckDBPyConnection, path: Path | str, key: str) -> int:
    """Load `path` into `experiments` keyed by its `key` column; returns the rows loaded."""
    path = Path(path)
    _stage(con, path)
    try:
        _rename_key(con, key, path)
        _check_unique_runs(con, key)
        count = con.execute("SELECT count(*) FROM staged_experiments").fetchone()[0]
        sqlfiles.execute(con, "views/staged_experiments.sql")
        # CREATE OR REPLACE dropped the descriptions of the table and its key `run`
        column_docs.describe_tables(con, ["experiments"])
    finally:
        con.execute("DROP TABLE IF EXISTS staged_experiments")
    return count


def _stage(con, path: Path) -> None:
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise CtdaError(f"{path}: unsupported file type {path.suffix or '(none)'}; use .csv, .json or .parquet")
    if not path.is_file():
        raise CtdaError(f"{path}: no such file")
    try:
        # the reader is chosen from a fixed table; the path is a bound parameter
        con.execute(f"CREATE OR REPLACE TEMP TABLE staged_experiments AS SELECT * FROM {reader}(?)",
                    [duckdb_path(path)])
    except duckdb.Error as exc:
        raise CtdaError(f"{path}: cannot read it ({str(exc).splitlines()[0]})") from None


def _columns(con, table: str) -> list[str]:
    return [row[0] for row in con.execute(f"DESCRIBE {table}").fetchall()]


def _rename_key(con, key: str, path: Path) -> None:
    columns = _columns(con, "staged_experiments")
    if key not in columns:
        raise CtdaError(f"{path}: no column {key!r} (columns: {', '.join(columns)})")
    if key != "run" and "run" in columns:
        raise CtdaError(f"{path}: has a column 'run' besides the key {key!r}; rename one of them")
    quoted = quote_identifier(key)
    con.execute(f"ALTER TABLE staged_experiments RENAME COLUMN {quoted} TO run")
    con.execute("ALTER TABLE staged_experiments ALTER run TYPE VARCHAR")


def _check_unique_runs(con, key: str) -> None:
    row = con.execute(
        "SELECT run, count(*) FROM staged_experiments GROUP BY run HAVING count(*) > 1 OR run IS NULL LIMIT 1"
    ).fetchone()
    if row:
        problem = "is empty in some rows" if row[0] is None else f"repeats the value {row[0]!r}"
        raise CtdaError(f"key column {key!r} {problem}; it must name each run once")


def check_meta_keys(con: duckdb.DuckDBPyConnection, meta: dict) -> None:
    """Refuse --meta keys that differ only in case from each other or from a stored key:
    they become run_meta columns, and DuckDB column names ignore case."""
    stored = [row[0] for row in con.execute(sqlfiles.load("views/meta_keys.sql")).fetchall()]
    seen: dict[str, str] = {}
    for key in stored:
        seen.setdefault(key.lower(), key)
    for key in meta:
        other = seen.setdefault(key.lower(), key)
        if other != key:
            raise CtdaError(f"--meta key {key!r} differs from the key {other!r} only in case; "
                            f"keys are column names of run_meta, which ignore case: use {other!r}")


def refresh_run_meta(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Re-create the run_meta view with one typed column per runs.meta key; returns the keys."""
    structure = _meta_column_types(con)
    if not structure:
        con.execute("CREATE OR REPLACE VIEW run_meta AS SELECT run_id, name AS run FROM runs")
        return []
    # the structure comes from DuckDB itself; it is quoted as a literal, never pasted raw
    transform = f"json_transform(meta, {quote_literal(json.dumps(structure))})"
    con.execute(
        "CREATE OR REPLACE VIEW run_meta AS SELECT * FROM "
        f"(SELECT run_id, name AS run, unnest({transform}) FROM runs)"
    )
    return list(structure)


def _meta_column_types(con) -> dict[str, str]:
    merged = json.loads(con.execute(sqlfiles.load("views/meta_structure.sql")).fetchone()[0])
    if not isinstance(merged, dict):
        return {}  # every meta is {}: DuckDB answers "NULL"
    types: dict[str, str] = {}
    taken: set[str] = set()
    for key, value in merged.items():
        # keys differing only in case (stored before check_meta_keys refused them) would be
        # duplicate columns: the first one stored becomes the column
        if key.lower() not in taken:
            taken.add(key.lower())
            types[key] = _scalar_type(value)
    return types


def _scalar_type(value) -> str:
    # mixed or null values become text; nested objects stay JSON
    if not isinstance(value, str):
        return "JSON"
    if value == "UBIGINT":
        return "BIGINT"
    return "VARCHAR" if value in ("JSON", "NULL") else value
