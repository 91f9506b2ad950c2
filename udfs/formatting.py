"""fmt_us(x): microseconds as a readable duration ('1.52 ms', '3.1 s')."""

from __future__ import annotations

import duckdb
from duckdb.func import SPECIAL
from duckdb.sqltypes import DOUBLE, VARCHAR

_UNITS = ((1e6, "s"), (1e3, "ms"))


def scale_us(value: float) -> tuple[float, str]:
    """(value, unit) in s or ms when it is at least one of them, else in µs."""
    for size, unit in _UNITS:
        if abs(value) >= size:
            return value / size, unit
    return value, "µs"


def fmt_us(value: float | None) -> str | None:
    """A duration in microseconds written with the largest unit that keeps it >= 1."""
    if value is None:
        return None
    if value and abs(value) < 1.0:
        return f"{value * 1000:.3g} ns"
    scaled, unit = scale_us(value)
    return f"{scaled:.3g} {unit}"


def register(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.create_function("fmt_us", fmt_us, [DOUBLE], VARCHAR, null_handling=SPECIAL)
    except duckdb.CatalogException:
        pass  # already registered on this connection
