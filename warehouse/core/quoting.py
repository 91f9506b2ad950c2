"""SQL text for the few places that must write a name or a value into SQL rather than bind it:
identifiers (DuckDB binds no table or column names) and the literals of DDL that takes no
parameters (COMMENT ON, a `json_transform` structure, `.mode insert` output)."""

from __future__ import annotations


def quote_identifier(name: str) -> str:
    """`name` as a DuckDB identifier: double-quoted, inner quotes doubled."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """`text` as a SQL string literal: single-quoted, inner quotes doubled."""
    return "'" + text.replace("'", "''") + "'"
