"""Python UDFs registered into every DuckDB connection of the warehouse."""

from __future__ import annotations

import duckdb

from .formatting import register as _register_formatting


def register_all(con: duckdb.DuckDBPyConnection) -> None:
    """Register every UDF of this package on `con` (idempotent per connection)."""
    _register_formatting(con)
