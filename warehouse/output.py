"""Render a query result (column names + rows) as table, csv, json, markdown or line."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import date, datetime
from decimal import Decimal

from udfs.formatting import scale_us

FORMATS = ("table", "csv", "json", "markdown", "line")


def render(columns: list[str], rows: list[tuple], fmt: str = "table", width: int | None = None) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return _RENDERERS[fmt](columns, rows, width)


def _json_value(value):
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


def _decoded(value):
    """JSON columns arrive as text; embed them as JSON, not as a string of JSON."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return _json_value(value)


def _as_json(columns, rows, width=None) -> str:
    objects = [{c: _decoded(v) for c, v in zip(columns, row)} for row in rows]
    return json.dumps(objects, indent=2, default=str, ensure_ascii=False)


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e15 else f"{value:.0f}"
    return str(value)


def _as_csv(columns, rows, width=None) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return buffer.getvalue().rstrip("\n")


def _as_markdown(columns, rows, width=None) -> str:
    def escape(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(escape(c) for c in columns) + " |"]
    lines.append("|" + "|".join("---:" if _numeric(rows, i) else "---" for i in range(len(columns))) + "|")
    lines += ["| " + " | ".join(escape(_cell(v)) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _as_line(columns, rows, width=None) -> str:
    pad = max((len(c) for c in columns), default=0)
    blocks = []
    for number, row in enumerate(rows, 1):
        head = f"***** row {number} *****"
        blocks.append("\n".join([head] + [f"{c.rjust(pad)}: {_cell(v)}" for c, v in zip(columns, row)]))
    return "\n".join(blocks)


def _numeric(rows, index: int) -> bool:
    values = [row[index] for row in rows if row[index] is not None]
    return bool(values) and all(isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in values)


def readable_us(value) -> str:
    """A microsecond value as the user reads it: 1,523.4 µs -> '1.52 ms'."""
    if value is None:
        return "NULL"
    scaled, unit = scale_us(float(value))
    return f"{scaled:,.{1 if unit == 'µs' else 2}f} {unit}"


def _as_table(columns, rows, width=None) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold", pad_edge=False)
    for index, name in enumerate(columns):
        table.add_column(name, justify="right" if _numeric(rows, index) else "left", overflow="fold")
    us_columns = {i for i, c in enumerate(columns) if c.endswith("_us")}
    for row in rows:
        table.add_row(*(readable_us(v) if i in us_columns and v is not None else _cell(v)
                        for i, v in enumerate(row)))
    console = Console(file=io.StringIO(), width=width or 200, color_system=None, legacy_windows=False)
    console.print(table)
    footer = f"({len(rows)} row{'s' if len(rows) != 1 else ''})"
    return console.file.getvalue().rstrip("\n") + "\n" + footer


_RENDERERS = {"table": _as_table, "csv": _as_csv, "json": _as_json, "markdown": _as_markdown, "line": _as_line}
