"""Transpile SQL written for other engines (Postgres, MySQL, ...) into DuckDB SQL with sqlglot."""

from __future__ import annotations

import sqlglot
from sqlglot.errors import ParseError

from .errors import CtdaError


def to_duckdb(sql: str, dialect: str | None) -> str:
    """`sql` unchanged for duckdb, else transpiled; a parse error becomes a CtdaError."""
    if not dialect or dialect.lower() == "duckdb":
        return sql
    try:
        statements = sqlglot.transpile(sql, read=dialect.lower(), write="duckdb")
    except ParseError as exc:
        raise CtdaError(f"cannot parse the {dialect} SQL: {str(exc).splitlines()[0]}") from None
    except ValueError as exc:
        raise CtdaError(f"unknown dialect {dialect!r} ({exc})") from None
    return ";\n".join(statements)
