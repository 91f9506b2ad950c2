"""Print query results: a duckbox-like table fitted to a width, or a streaming format
(csv, tsv, json, jsonlines, markdown, line, list, html, insert) written batch by batch as
DuckDB produces the rows.

`write_cursor` prints an executed DuckDB cursor; `render` formats rows already in memory
(dot-command results, report lists) the same way.
"""

from __future__ import annotations

import csv
import io
import json
import math
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import TextIO

from ctda_sql.cli.cells import cell_text as _cell
from ctda_sql.cli.cells import plain_float
from ctda_sql.cli.tables import table
from ctda_sql.core.config import FORMATS  # noqa: F401  (the settings file names one)
from ctda_sql.core.quoting import quote_literal
from ctda_sql.core.terminal import is_tty

# tables show this many rows unless told otherwise (DuckDB's duckbox shows 40)
DEFAULT_TABLE_ROWS = 40
# rows fetched from DuckDB per batch by the streaming formats
BATCH_ROWS = 2048


def default_format(stream: TextIO) -> str:
    """table for a terminal; csv when the output goes to a pipe or a file, so it streams."""
    return "table" if is_tty(stream) else "csv"




# ---- cursors (streamed) --------------------------------------------------------------------

def write_cursor(cursor, fmt: str, out: TextIO, width: int | None = None,
                 max_rows: int = DEFAULT_TABLE_ROWS, style: TextStyle | None = None) -> int:
    """Print the rows of an executed cursor to `out`; returns how many rows it held.

    Tables fetch only the rows they show and count the rest, and keep a report's key columns
    (`key_columns` of run_report's cursor); the other formats write each batch as it
    arrives, so `| head` sees the first rows at once."""
    _check_format(fmt)
    if not cursor.description:
        return 0
    columns = [d[0] for d in cursor.description]
    if fmt == "table":
        shown = cursor.fetchmany(max_rows)
        total = len(shown) + _count_rest(cursor)
        out.write(table(columns, shown, width, total, getattr(cursor, "key_columns", ())) + "\n")
        return total
    if fmt in _EXACT:
        types = [str(d[1]) for d in cursor.description]
        return _EXACT[fmt](columns, types, _exact_batches(cursor, types), out)
    return _write_stream(_stream(fmt, style)(columns, out), lambda: cursor.fetchmany(BATCH_ROWS), out)


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
    if closing := getattr(writer, "closing", ""):  # html's </table>
        out.write(closing)
    return count


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


# ---- rows in memory --------------------------------------------------------------------------

def render(columns: list[str], rows: list[tuple], fmt: str = "table", width: int | None = None,
           total: int | None = None, keys: Collection[str] = (), style: TextStyle | None = None) -> str:
    """The rows as text in `fmt`; tables fit `width`, keep the `keys` columns and say when
    `total` rows exceed them."""
    _check_format(fmt)
    if fmt == "table":
        return table(columns, rows, width, len(rows) if total is None else total, keys)
    buffer = io.StringIO()
    if fmt in _EXACT:
        _EXACT[fmt](columns, [None] * len(columns), iter([rows]), buffer)
    else:
        _write_stream(_stream(fmt, style)(columns, buffer), iter([rows, []]).__next__, buffer)
    return buffer.getvalue().rstrip("\n")


# ---- csv, tsv, markdown, line ----------------------------------------------------------------

def _csv_writer(delimiter: str):
    def start(columns, out):
        writer = csv.writer(out, lineterminator="\n", delimiter=delimiter)
        writer.writerow(columns)
        return lambda batch, _: writer.writerows(["" if v is None else plain_float(v) if isinstance(v, float) else v
                                                  for v in row] for row in batch)
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


def _list_writer(columns, out, separator: str = "|"):
    """DuckDB's list mode: the header, then each row's values between separators, unquoted."""
    out.write(separator.join(columns) + "\n")

    def write(batch, _):
        out.writelines(separator.join(_cell(v) for v in row) + "\n" for row in batch)
    return write


def _html_writer(columns, out):
    """An HTML table, every name and value escaped: it pastes into a page as it is."""
    from html import escape

    out.write("<table>\n<tr>" + "".join(f"<th>{escape(c)}</th>" for c in columns) + "</tr>\n")

    def write(batch, _):
        out.writelines("<tr>" + "".join(f"<td>{escape(_cell(v))}</td>" for v in row) + "</tr>\n" for row in batch)
    write.closing = "</table>\n"
    return write


_STREAMS = {"csv": _csv_writer(","), "tsv": _csv_writer("\t"), "markdown": _markdown_writer, "line": _line_writer,
            "list": _list_writer, "html": _html_writer}


@dataclass(frozen=True)
class TextStyle:
    """The shell's .headers, .nullvalue and .separator, honoured by csv, tsv and list."""

    headers: bool = True
    null: str | None = None  # text for NULL; default: empty in csv and tsv, NULL in list
    separator: str | None = None  # default: the format's own (',', tab, '|'); csv and tsv need one character


_SEPARATORS = {"csv": ",", "tsv": "\t", "list": "|"}


def _stream(fmt: str, style: TextStyle | None):
    """The writer of a streaming format, styled when `style` asks for it."""
    if style is None or style == TextStyle() or fmt not in _SEPARATORS:
        return _STREAMS[fmt]
    separator = style.separator or _SEPARATORS[fmt]
    null = style.null if style.null is not None else "NULL" if fmt == "list" else ""

    def start(columns, out):
        if fmt == "list":
            def line(values):
                out.write(separator.join(values) + "\n")
        else:
            line = csv.writer(out, lineterminator="\n", delimiter=separator).writerow
        if style.headers:
            line(columns)

        def write(batch, _):
            for row in batch:
                line([null if v is None else _cell(v) for v in row])
        return write
    return start


# ---- json, jsonlines, insert: exact values -----------------------------------------------------

def _exact_batches(cursor, types: list[str]):
    if any(t.startswith("TIMESTAMP_NS") for t in types):
        return _arrow_batches(cursor, types)  # Python datetimes would drop the nanoseconds
    return iter(lambda: cursor.fetchmany(BATCH_ROWS), [])


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


def _write_json_lines(columns, types, batches, out: TextIO) -> int:
    """One JSON object a line (JSON Lines), written as the batches arrive."""
    keys = [json.dumps(c, ensure_ascii=False) for c in columns]
    is_json = [str(t) == "JSON" for t in types]
    count = 0
    for batch in batches:
        out.writelines("{" + ", ".join(f"{k}: {_json_text(v, raw)}" for k, v, raw in zip(keys, row, is_json)) + "}\n"
                       for row in batch)
        count += len(batch)
        out.flush()
    return count


# the table the insert format's statements name, as in DuckDB's and SQLite's shells
INSERT_TABLE = "table"


def _write_inserts(columns, types, batches, out: TextIO) -> int:
    """One INSERT statement a row, every value a quoted SQL literal: loading them back into a
    table of these columns gives the same values, and no text can end its quotes."""
    head = f"INSERT INTO {sql_identifier(INSERT_TABLE)}({', '.join(map(sql_identifier, columns))}) VALUES ("
    count = 0
    for batch in batches:
        out.writelines(head + ", ".join(sql_literal(v) for v in row) + ");\n" for row in batch)
        count += len(batch)
        out.flush()
    return count


def sql_identifier(name: str) -> str:
    return '"' + str(name).replace('"', '""') + '"'


def sql_literal(value) -> str:
    """`value` as DuckDB SQL text that reads back as the same value."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"'{value}'::DOUBLE"
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else f"'{value}'::DOUBLE"
    if isinstance(value, timedelta):
        return f"INTERVAL '{value // timedelta(microseconds=1)} microseconds'"
    if type(value).__name__ == "MonthDayNano":  # an interval read through Arrow
        months, days, nanoseconds = value
        return f"INTERVAL '{months} months {days} days {nanoseconds // 1000} microseconds'"
    if isinstance(value, (bytes, bytearray)):
        return "'" + "".join(f"\\x{byte:02X}" for byte in value) + "'::BLOB"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{sql_literal(str(k))}: {sql_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(sql_literal(v) for v in value) + "]"
    return quote_literal(str(value))  # text, dates and times, UUIDs, JSON


_EXACT = {"json": _write_json_rows, "jsonlines": _write_json_lines, "insert": _write_inserts}


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
    if is_tty(stream):
        return shutil.get_terminal_size().columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None
