"""Python UDFs registered into DuckDB connections of the warehouse."""

from __future__ import annotations

import re
from collections.abc import Callable

import duckdb

from ctda_sql.udfs.formatting import register as _register_formatting

# UDF name -> what registers it. Registering any Python UDF makes DuckDB import numpy
# (~0.15 s), so one-shot commands register only the UDFs their SQL names.
REGISTRY: dict[str, Callable[[duckdb.DuckDBPyConnection], None]] = {
    "fmt_us": _register_formatting,
}


def register_all(con: duckdb.DuckDBPyConnection) -> None:
    """Register every UDF of this package on `con` (idempotent per connection)."""
    for register in REGISTRY.values():
        register(con)


def register_named_in(con: duckdb.DuckDBPyConnection, sql: str) -> list[str]:
    """Register the UDFs whose name appears as a word in `sql`; returns their names."""
    named = [name for name in REGISTRY if re.search(rf"\b{name}\b", sql, re.IGNORECASE)]
    for name in named:
        REGISTRY[name](con)
    return named
