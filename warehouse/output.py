"""Print query results: a duckbox-like table fitted to a width, or a streaming format
(csv, tsv, json, markdown, line) written batch by batch as DuckDB produces the rows.

`write_cursor` prints an executed DuckDB cursor; `render` formats rows already in memory
(dot-command results, report lists) the same way.
"""

from __future__ import annotations

import csv
import io
import json
import math
import warnings
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import TextIO

from udfs.formatting import scale_us

FORMATS = ("table", "csv", "tsv", "json", "markdown", "line")
# tables show this many rows unless told otherwise (DuckDB's duckbox shows 40)
DEFAULT_TABLE_ROWS = 40
# rows fetched from DuckDB per batch by the streaming formats
BATCH_ROWS = 2048
# a column is never squeezed narrower than this to make a table fit (unless its text is)
MIN_COLUMN_WIDTH = 6
# when middle columns must go, the ones kept are cut to this width
KEPT_COLUMN_WIDTH = 20
ELLIPSIS = "…"


def default_format(stream: TextIO) -> str:
    """table for a terminal; csv when the output goes to a pipe or a file, so it streams."""
    return "table" if _is_tty(stream) else "csv"


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# ---- cursors (streamed) --------------------------------------------------------------------

def write_cursor(cursor, fmt: str, out: TextIO, width: int | None = None,
                 max_rows: int = DEFAULT_TABLE_ROWS) -> int:
    """Print the rows of an executed cursor to `out`; returns how many rows it held.

    Tables fetch only the rows they show and count the rest; the other formats write each
    batch as it arrives, so `| head` sees the first rows at once."""
    _check_format(fmt)
    if not cursor.description:
        return 0
    columns = [d[0] for d in cursor.description]
    if fmt == "table":
        shown = cursor.fetchmany(max_rows)
        total = len(shown) + _count_rest(cursor)
        out.write(table(columns, shown, width, total) + "\n")
        return total
    if fmt == "json":
        return _write_json(cursor, columns, out)
    return _write_stream(_STREAMS[fmt](columns, out), lambda: cursor.fetchmany(BATCH_ROWS), out)


def _count_rest(cursor) -> int:
    count = 0
    while batch := cursor.fetchmany(BATCH_ROWS * 16):
        count += len(batch)
    return count


def _write_stream(writer, next_batch, out: TextIO) -> int:
    count = 0
    while batch := next_batch():
        writer(batch, count)
        count += len(batch)
        out.flush()
    return count


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


# ---- rows in memory --------------------------------------------------------------------------

def render(columns: list[str], rows: list[tuple], fmt: str = "table", width: int | None = None,
           total: int | None = None) -> str:
    """The rows as text in `fmt`; tables fit `width` and say when `total` rows exceed them."""
    _check_format(fmt)
    if fmt == "table":
        return table(columns, rows, width, len(rows) if total is None else total)
    buffer = io.StringIO()
    if fmt == "json":
        _write_json_rows(columns, [None] * len(columns), iter([rows]), buffer)
    else:
        _write_stream(_STREAMS[fmt](columns, buffer), iter([rows, []]).__next__, buffer)
    return buffer.getvalue().rstrip("\n")


# ---- csv, tsv, markdown, line ----------------------------------------------------------------

def _csv_writer(delimiter: str):
    def start(columns, out):
        writer = csv.writer(out, lineterminator="\n", delimiter=delimiter)
        writer.writerow(columns)
        return lambda batch, _: writer.writerows(["" if v is None else v for v in row] for row in batch)
    return start


def _markdown_writer(columns, out):
    def escape(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    out.write("| " + " | ".join(escape(c) for c in columns) + " |\n")
    out.write("|" + "|".join("---" for _ in columns) + "|\n")

    def write(batch, _):
        out.writelines("| " + " | ".join(escape(_cell(v)) for v in row) + " |\n" for row in batch)
    return write


def _line_writer(columns, out):
    pad = max((len(c) for c in columns), default=0)

    def write(batch, before):
        for number, row in enumerate(batch, before + 1):
            out.write(f"***** row {number} *****\n")
            out.writelines(f"{c.rjust(pad)}: {_cell(v)}\n" for c, v in zip(columns, row))
    return write


_STREAMS = {"csv": _csv_writer(","), "tsv": _csv_writer("\t"), "markdown": _markdown_writer, "line": _line_writer}


# ---- json: exact values ----------------------------------------------------------------------

def _write_json(cursor, columns: list[str], out: TextIO) -> int:
    types = [str(d[1]) for d in cursor.description]
    if any(t.startswith("TIMESTAMP_NS") for t in types):
        batches = _arrow_batches(cursor, types)  # Python datetimes would drop the nanoseconds
    else:
        batches = iter(lambda: cursor.fetchmany(BATCH_ROWS), [])
    return _write_json_rows(columns, types, batches, out)


def _arrow_batches(cursor, types: list[str]):
    """Rows with nanosecond timestamps as DuckDB's own text, read through Arrow."""
    import pyarrow as pa

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DuckDB warns that Arrow from a cursor copies the rows
        reader = cursor.to_arrow_reader(BATCH_ROWS)
    for batch in reader:
        values = [column.cast(pa.string()).to_pylist() if kind.startswith("TIMESTAMP_NS") else column.to_pylist()
                  for column, kind in zip(batch.columns, types)]
        yield [tuple(row) for row in zip(*values)] if values else []


def _write_json_rows(columns, types, batches, out: TextIO) -> int:
    """A JSON array of objects, one per line, written as the batches arrive."""
    keys = [json.dumps(c, ensure_ascii=False) for c in columns]
    is_json = [str(t) == "JSON" for t in types]
    count = 0
    out.write("[")
    for batch in batches:
        for row in batch:
            fields = (f"{k}: {_json_text(v, raw)}" for k, v, raw in zip(keys, row, is_json))
            out.write(("," if count else "") + "\n  {" + ", ".join(fields) + "}")
            count += 1
        out.flush()
    out.write("\n]\n" if count else "]\n")
    return count


def _json_text(value, is_json_column: bool = False) -> str:
    """One value as JSON text, exactly: integers and decimals keep every digit."""
    if value is None:
        return "null"
    if is_json_column and isinstance(value, str):
        return value  # DuckDB JSON columns are already JSON text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else "null"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "null"
    if isinstance(value, (datetime, date, time)):
        return json.dumps(value.isoformat())
    if isinstance(value, timedelta):
        return json.dumps(str(value))
    if isinstance(value, (bytes, bytearray)):
        return json.dumps(value.hex())
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_json_text(v) for v in value) + "]"
    return json.dumps(value if isinstance(value, str) else str(value), ensure_ascii=False)


# ---- table -----------------------------------------------------------------------------------

def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e15 else f"{value:.0f}"
    return str(value)


def readable_us(value) -> str:
    """A microsecond value as the user reads it: 1,523.4 µs -> '1.52 ms'."""
    if value is None:
        return "NULL"
    scaled, unit = scale_us(float(value))
    return f"{scaled:,.{1 if unit == 'µs' else 2}f} {unit}"


def _numeric(rows, index: int) -> bool:
    values = [row[index] for row in rows if row[index] is not None]
    return bool(values) and all(isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in values)


def _text_width(text: str) -> int:
    from wcwidth import wcswidth  # ~0.03 s to import: only table output measures text

    width = wcswidth(text)
    return width if width >= 0 else len(text)


def _clip(text: str, width: int) -> str:
    """`text` cut to `width` display cells, ending with … when cut."""
    text = text.replace("\n", "\\n")
    if _text_width(text) <= width:
        return text
    kept, used = [], 0
    for char in text:
        size = max(_text_width(char), 0)
        if used + size > width - 1:
            break
        kept.append(char)
        used += size
    return "".join(kept) + ELLIPSIS


def table(columns: list[str], rows: list[tuple], width: int | None = None, total: int | None = None) -> str:
    """A boxed table like DuckDB's duckbox, no wider than `width`: wide cells are cut with …
    and, when that is not enough, middle columns give way to a … column."""
    total = len(rows) if total is None else total
    us_columns = {i for i, c in enumerate(columns) if c.endswith("_us")}
    cells = [[readable_us(v) if i in us_columns and v is not None else _cell(v) for i, v in enumerate(row)]
             for row in rows]
    natural = [max([_text_width(c)] + [_text_width(r[i].replace("\n", "\\n")) for r in cells])
               for i, c in enumerate(columns)]
    shown, widths = _fit(natural, width)
    right = {i for i in range(len(columns)) if _numeric(rows, i)}

    def line(texts_by_column: dict[int, str]) -> str:
        parts = []
        for index in shown:
            if index is None:
                parts.append(ELLIPSIS)
                continue
            text = _clip(texts_by_column[index], widths[index])
            pad = " " * (widths[index] - _text_width(text))
            parts.append(pad + text if index in right else text + pad)
        return "│ " + " │ ".join(parts) + " │"

    def rule(left: str, middle: str, end: str) -> str:
        return left + middle.join("─" * ((1 if i is None else widths[i]) + 2) for i in shown) + end

    lines = [rule("┌", "┬", "┐"), line(dict(enumerate(columns))), rule("├", "┼", "┤")]
    lines += [line(dict(enumerate(row))) for row in cells]
    lines.append(rule("└", "┴", "┘"))
    lines.append(_footer(total, len(rows), len(columns), sum(i is not None for i in shown)))
    return "\n".join(lines)


def _footer(total: int, shown_rows: int, columns: int, shown_columns: int) -> str:
    text = f"({total:,} row{'s' if total != 1 else ''}"
    if shown_rows < total:
        text += f", {shown_rows:,} shown"
    if shown_columns < columns:
        text += f"; {shown_columns} of {columns} columns shown"
    return text + ")"


def _fit(natural: list[int], width: int | None) -> tuple[list[int | None], list[int]]:
    """(columns to show, None standing for the … column; their widths) within `width`."""
    indexes = list(range(len(natural)))
    if not width or _table_width(natural) <= width:
        return indexes, natural
    cap = _widest_cap(natural, width)
    if cap is not None:
        return indexes, [min(w, cap) for w in natural]
    kept = [min(w, KEPT_COLUMN_WIDTH) for w in natural]
    return _elide_middle(kept, width), kept


def _table_width(widths: list[int]) -> int:
    return sum(widths) + 3 * len(widths) + 1


def _widest_cap(natural: list[int], width: int) -> int | None:
    """The largest cell width that makes every column fit, if one >= MIN_COLUMN_WIDTH does."""
    low, high, best = MIN_COLUMN_WIDTH, max(natural), None
    while low <= high:
        cap = (low + high) // 2
        if _table_width([min(w, cap) for w in natural]) <= width:
            best, low = cap, cap + 1
        else:
            high = cap - 1
    return best


def _elide_middle(widths: list[int], width: int) -> list[int | None]:
    """Columns taken from both ends in turn while they and a … column fit."""
    left, right, used = [], [], 1 + 4  # the outer border and the … column
    front, back = 0, len(widths) - 1
    while front <= back:
        take_front = len(left) <= len(right)
        index = front if take_front else back
        if used + widths[index] + 3 > width:
            break
        used += widths[index] + 3
        if take_front:
            left.append(index)
            front += 1
        else:
            right.insert(0, index)
            back -= 1
    return left + [None] + right


def add_max_width(parser) -> None:
    """--max-width, for every command that prints tables (it feeds table_width)."""
    parser.add_argument("--max-width", type=count, metavar="N",
                        help="widest table in characters, 0 for no limit (default: the terminal's width)")


def count(text: str) -> int:
    """An argparse type: a whole number, 0 or more (as the settings file requires)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return value


def table_width(stream: TextIO, max_width: int | None = None) -> int | None:
    """How wide tables may be: --max-width / .maxwidth (0: no limit), else the terminal's
    width ($COLUMNS first), else $COLUMNS for pipes and files, else no limit."""
    import os
    import shutil

    if max_width is not None:
        return max_width or None
    if _is_tty(stream):
        return shutil.get_terminal_size().columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None
