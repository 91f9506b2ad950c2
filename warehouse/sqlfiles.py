"""SQL kept as .sql files in the `sql` and `queries` packages, read with importlib.resources."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import duckdb


@lru_cache(maxsize=None)
def load(name: str, package: str = "sql") -> str:
    """Text of `name` (a path like 'ingest/events.sql') inside `package`."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def names(folder: str, package: str = "sql") -> list[str]:
    """Sorted .sql file names directly inside `folder` of `package`."""
    base = resources.files(package).joinpath(folder) if folder else resources.files(package)
    return sorted(entry.name for entry in base.iterdir() if entry.name.endswith(".sql"))


def execute(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Run every statement of a parameterless .sql file, in one call: a call per statement
    costs more than the statements (it is most of opening a connection)."""
    con.execute(load(name))


@lru_cache(maxsize=256)
def parameterized_statements(sql_text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """(statement, named parameters it uses) for each statement of a .sql file. Cached:
    DuckDB parses the whole file to split it, ~5-10 ms a stage file on every analyze."""
    return tuple((st.query, frozenset(st.named_parameters)) for st in duckdb.extract_statements(sql_text))
