"""SQL kept as .sql files in the `sql` and `queries` packages, read with importlib.resources."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

import duckdb


@lru_cache(maxsize=None)
def load(name: str, package: str = "ctda_sql.sql") -> str:
    """Text of `name` (a path like 'ingest/event_rows.sql') inside `package`."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def names(folder: str, package: str = "ctda_sql.sql") -> list[str]:
    """Sorted .sql file names directly inside `folder` of `package`."""
    base = resources.files(package).joinpath(folder) if folder else resources.files(package)
    return sorted(entry.name for entry in base.iterdir() if entry.name.endswith(".sql"))


def execute(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Run every statement of a parameterless .sql file, in one call: a call per statement
    costs more than the statements (it is most of opening a connection)."""
    con.execute(load(name))


# a declared parameter, as queries/*.sql reports and sql stage contracts write it:
# `-- param: top INTEGER = 20   rows to keep` (type, then an optional default and help)
PARAM_LINE = re.compile(
    r"^--\s*param:\s*(?P<name>[A-Za-z_]\w*)\s+(?P<type>[A-Za-z]+(?:\[\])?)\s*(?:=\s*(?P<default>\S+))?\s*(?P<help>.*)$"
)
_PARAMETER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_COMMENT = re.compile(r"--[^\n]*")
_CODE_LINE = re.compile(r"^\s*[^-\s]", re.MULTILINE)


@lru_cache(maxsize=256)
def parameterized_statements(sql_text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """(statement, named parameters it uses) for each statement of a .sql file of ours.

    Split by text, not by DuckDB's parser: extract_statements would parse the whole file only
    for con.execute to parse each statement again, in every `ctda-sql analyze` process.
    Our stage files end each statement with `;` at the end of a code line and name
    parameters as $name; tests/unit/test_sql_files.py checks the split equals DuckDB's for every
    file that runs through here."""
    statements, current = [], []
    for line in sql_text.splitlines(keepends=True):
        current.append(line)
        if line.rstrip().endswith(";") and not line.lstrip().startswith("--"):
            statements.append("".join(current))
            current = []
    rest = "".join(current)
    if _CODE_LINE.search(rest):
        statements.append(rest)
    return tuple((statement, frozenset(_PARAMETER.findall(_COMMENT.sub("", statement))))
                 for statement in statements)


def duckdb_statements(sql_text: str) -> list[tuple[str, frozenset[str]]]:
    """parameterized_statements as DuckDB's parser splits them (the reference for tests)."""
    return [(st.query, frozenset(st.named_parameters)) for st in duckdb.extract_statements(sql_text)]
