"""fmt_us(x): microseconds as a readable duration ('1.52 ms', '3.1 s')."""

from __future__ import annotations

import duckdb
from duckdb.sqltypes import DOUBLE, VARCHAR

_UNITS = ((1e6, "s"), (1e3, "ms"), (1.0, "µs"))


def fmt_us(value: float | None) -> str | None:
    """A duration in microseconds written with the largest unit that keeps it >= 1."""
    if value is None:
        return None
    magnitude = abs(value)
    for size, unit in _UNITS:
        if magnitude >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value * 1000:.3g} ns" if value else "0 µs"


def register(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.create_function("fmt_us", fmt_us, [DOUBLE], VARCHAR, null_handling="special")
    except duckdb.CatalogException:
        pass  # already registered on this connection
