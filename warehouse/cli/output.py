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
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import TextIO

from ctda_sql.core.config import FORMATS  # noqa: F401  (the settings file names one)
from ctda_sql.udfs.formatting import scale_us

# tables show this many rows unless told otherwise (DuckDB's duckbox shows 40)
DEFAULT_TABLE_ROWS = 40
# rows fetched from DuckDB per batch by the streaming formats
BATCH_ROWS = 2048
# text columns are never squeezed narrower than this to make a table fit (unless their text is),
# the one that names the rows (the widest) never narrower than FIRST_TEXT_WIDTH
MIN_TEXT_WIDTH = 16
FIRST_TEXT_WIDTH = 28
# columns whose prose wraps onto more lines rather than being cut
# significant digits of a float in a table (every digit before the point is always kept)
TABLE_DIGITS = 6
# significant digits the text formats print, and decimals they keep at least (a nanosecond of
# a µs value): a double holds 15-17, but sums and differences of a trace's µs values carry
# rounding into the 13th (0.1 + 0.2 = 0.30000000000000004; a slack_after_us is
# 288.97200000000885 for 288.972). JSON and INSERT keep every digit, for machines.
TEXT_DIGITS = 12
TEXT_DECIMALS = 3
WRAPPED_COLUMNS = {"description", "comment", "help", "params", "parameters", "note", "rule"}
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
    if fmt in _EXACT:
        types = [str(d[1]) for d in cursor.description]
        return _EXACT[fmt](columns, types, _exact_batches(cursor, types), out)
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
    if closing := getattr(writer, "closing", ""):  # html's </table>
        out.write(closing)
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
    if fmt in _EXACT:
        _EXACT[fmt](columns, [None] * len(columns), iter([rows]), buffer)
    else:
        _write_stream(_STREAMS[fmt](columns, buffer), iter([rows, []]).__next__, buffer)
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
    return "'" + str(value).replace("'", "''") + "'"  # text, dates and times, UUIDs, JSON


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


# ---- table -----------------------------------------------------------------------------------

def _cell(value) -> str:
    """A value as text with every digit, in every format: never 1.00738e+06 for 1007380.5."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return plain_float(value)
    return str(value)


def exact_float(value: float) -> str:
    """The shortest text that reads back as `value`, in positional notation (no exponent)."""
    if not math.isfinite(value):
        return str(value)
    text = repr(value)
    if "e" not in text:
        return text
    return format(Decimal(text), "f")


def plain_float(value: float) -> str:
    """`value` as the text formats print it: its shortest digits up to TEXT_DIGITS significant
    ones and at least TEXT_DECIMALS decimals (192031.71500000008, a sum of 192031.715's parts,
    prints 192031.715), positional. Every digit before the point stays (epoch µs too)."""
    if math.isfinite(value) and value != 0:
        integer_digits = max(math.floor(math.log10(abs(value))) + 1, 0)
        digits = max(TEXT_DIGITS, integer_digits + TEXT_DECIMALS)
        if digits < 17:  # 17 digits tell any double exactly: nothing to round
            value = float(f"{value:.{digits}g}")
    return exact_float(value)


def _table_cell(value) -> str:
    """A value as a table shows it. Floats, like the µs columns, are rounded for reading, to
    6 significant digits, but never lose a digit before the point nor turn into an exponent
    (1007380.5, 52051.2, 0.0901235); every other format prints every digit."""
    if not isinstance(value, float) or not math.isfinite(value) or value == 0:
        return _cell(value)
    magnitude = abs(value)
    if magnitude >= 1:
        decimals = max(TABLE_DIGITS - len(str(int(magnitude))), 1)
    else:  # the zeros after the point do not count as digits
        decimals = TABLE_DIGITS - 1 - math.floor(math.log10(magnitude))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".")


def readable_us(value) -> str:
    """A microsecond value as the user reads it: 1,523.4 µs -> '1.52 ms'."""
    if value is None:
        return "NULL"
    scaled, unit = scale_us(float(value))
    return f"{scaled:,.{1 if unit == 'µs' else 2}f} {unit}"


def _numeric(rows, index: int) -> bool:
    values = [row[index] for row in rows if row[index] is not None]
    return bool(values) and all(isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in values)


def _timelike(rows, index: int) -> bool:
    values = [row[index] for row in rows if row[index] is not None]
    return bool(values) and all(isinstance(v, (datetime, date, time, timedelta)) for v in values)


def _text_width(text: str) -> int:
    from wcwidth import wcswidth  # ~0.03 s to import: only table output measures text

    width = wcswidth(text)
    return width if width >= 0 else len(text)


def _take(chars, width: int) -> str:
    """The leading characters of `chars` that fill at most `width` display cells."""
    kept, used = [], 0
    for char in chars:
        size = max(_text_width(char), 0)
        if used + size > width:
            break
        kept.append(char)
        used += size
    return "".join(kept)


def _clip(text: str, width: int) -> str:
    """`text` cut to `width` display cells in the middle, where long names repeat themselves:
    'autograd::engine::evaluate_function: torch::autograd::AccumulateGrad' -> 'autograd::…AccumulateGrad'."""
    text = text.replace("\n", "\\n")
    if _text_width(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = _take(text, (width - 1) // 2)
    tail = _take(reversed(text), width - 1 - _text_width(head))[::-1]
    return head + ELLIPSIS + tail


def _wrap(text: str, width: int) -> list[str]:
    """`text` as lines of at most `width` cells, broken at spaces (descriptions, parameters)."""
    import textwrap

    lines = []
    for paragraph in text.split("\n"):
        lines += textwrap.wrap(paragraph, width, break_on_hyphens=False, break_long_words=False) or [""]
    return [_clip(line, width) for line in lines]


def _is_wrapped(column: str) -> bool:
    return column.lower() in WRAPPED_COLUMNS


def table(columns: list[str], rows: list[tuple], width: int | None = None, total: int | None = None) -> str:
    """A boxed table like DuckDB's duckbox, no wider than `width`. As DuckDB's CLI does, it
    never cuts a number or its unit: whole middle columns give way to a … column (the footer
    names them), text columns shrink, long names lose their middle, descriptions wrap."""
    total = len(rows) if total is None else total
    us_columns = {i for i, c in enumerate(columns) if c.endswith("_us")}
    cells = [[readable_us(v) if i in us_columns and v is not None else _table_cell(v) for i, v in enumerate(row)]
             for row in rows]
    right = {i for i in range(len(columns)) if _numeric(rows, i)}
    # columns never cut: numbers, durations with their unit, times
    numbers = right | {i for i in range(len(columns)) if _timelike(rows, i)} | \
        {i for i in us_columns if all(r[i] is None for r in rows)}
    wrapped = {i for i, c in enumerate(columns) if _is_wrapped(c) and i not in numbers}

    def natural_width(index: int, text: str) -> int:
        lines = text.split("\n") if index in wrapped else [text.replace("\n", "\\n")]
        return max(_text_width(line) for line in lines)

    natural = [max([_text_width(c)] + [natural_width(i, r[i]) for r in cells]) for i, c in enumerate(columns)]
    shown, widths = _fit(natural, numbers, width)

    def lines_of(texts_by_column: dict[int, str], header: bool = False) -> list[str]:
        parts = {}
        for index in shown:
            if index is None:
                continue
            text = texts_by_column[index]
            parts[index] = (_wrap(text, widths[index]) if index in wrapped and not header
                            else [_clip(text, widths[index])])
        height = max((len(p) for p in parts.values()), default=1)
        out = []
        for number in range(height):
            pieces = []
            for index in shown:
                if index is None:
                    pieces.append(ELLIPSIS if number == 0 else " ")
                    continue
                text = parts[index][number] if number < len(parts[index]) else ""
                pad = " " * (widths[index] - _text_width(text))
                pieces.append(pad + text if index in right else text + pad)
            out.append("│ " + " │ ".join(pieces) + " │")
        return out

    def rule(left: str, middle: str, end: str) -> str:
        return left + middle.join("─" * ((1 if i is None else widths[i]) + 2) for i in shown) + end

    lines = [rule("┌", "┬", "┐"), *lines_of(dict(enumerate(columns)), header=True), rule("├", "┼", "┤")]
    for row in cells:
        lines += lines_of(dict(enumerate(row)))
    lines.append(rule("└", "┴", "┘"))
    hidden = [columns[i] for i in range(len(columns)) if i not in shown]
    lines.append(_footer(total, len(rows), hidden, width))
    return "\n".join(lines)


def _footer(total: int, shown_rows: int, hidden: list[str], width: int | None) -> str:
    text = f"({total:,} row{'s' if total != 1 else ''}"
    if shown_rows < total:
        text += f", {shown_rows:,} shown"
    if not hidden:
        return text + ")"
    text += f"; {len(hidden)} column{'s' if len(hidden) != 1 else ''} hidden: "
    names = ", ".join(hidden)
    room = (width or 0) - _text_width(text) - 1
    if width and _text_width(names) > room:
        names = _take(names, max(room - 1, 0)).rstrip(", ") + ELLIPSIS
    return text + names + ")"


def _fit(natural: list[int], numbers: set[int], width: int | None) -> tuple[list[int | None], list[int]]:
    """(columns to show, None standing for the … column; their widths) within `width`.

    Numbers and times keep their width; text columns shrink to a floor (the one that names the
    rows to a wider one); when the floors do not fit, middle columns go; what width is left
    goes to the naming column first, then to the other text columns by what each lacks."""
    indexes = list(range(len(natural)))
    if not width or _table_width(natural) <= width:
        return indexes, natural
    naming = _naming_column(natural, numbers)
    floor = [natural[i] if i in numbers else
             min(natural[i], FIRST_TEXT_WIDTH if i == naming else MIN_TEXT_WIDTH) for i in indexes]
    shown = indexes if _table_width(floor) <= width else _drop_middle(floor, width, naming)
    widths = list(floor)
    kept = [i for i in shown if i is not None]
    if len(kept) == 1 and _shown_width(shown, widths) > width:  # one column wider than the screen
        widths[kept[0]] = max(width - (_shown_width(shown, widths) - widths[kept[0]]), 1)
    slack = width - _shown_width(shown, widths)
    if naming in kept:
        extra = max(min(slack, natural[naming] - widths[naming]), 0)
        widths[naming] += extra
        slack -= extra
    # the rest shared by what each other text column lacks (a description and its parameters)
    wanting = {i: natural[i] - widths[i] for i in kept if i not in numbers and natural[i] > widths[i]}
    lacking = sum(wanting.values())
    for index, want in wanting.items():
        extra = min(want, slack * want // lacking) if lacking > slack else want
        widths[index] += extra
    return shown, widths


def _naming_column(natural: list[int], numbers: set[int]) -> int | None:
    """The text column that names the rows (op or kernel names): the widest, the first of
    equals. It keeps the most width and gets the slack first."""
    texts = [i for i in range(len(natural)) if i not in numbers]
    return max(texts, key=lambda i: (natural[i], -i)) if texts else None


def _table_width(widths: list[int]) -> int:
    return sum(widths) + 3 * len(widths) + 1


def _shown_width(shown: list[int | None], widths: list[int]) -> int:
    return _table_width([1 if i is None else widths[i] for i in shown])


def _drop_middle(widths: list[int], width: int, naming: int | None) -> list[int | None]:
    """The naming column, then the columns from the left while they fit, then from the right
    while they still do; a … column stands for each run of columns left out."""
    chosen = {naming} if naming is not None else set()

    def fits(extra: int) -> bool:
        return _shown_width(_with_gaps(chosen | {extra}, len(widths)), widths) <= width

    front = 0
    while front < len(widths) and (front in chosen or fits(front)):
        chosen.add(front)
        front += 1
    for index in range(len(widths) - 1, front, -1):
        if index not in chosen:
            if not fits(index):
                break
            chosen.add(index)
    return _with_gaps(chosen or {0}, len(widths))


def _with_gaps(chosen: set[int], count: int) -> list[int | None]:
    """The chosen columns in order, None (a … column) where columns between them are left out."""
    shown: list[int | None] = []
    for index in range(count):
        if index in chosen:
            shown.append(index)
        elif not shown or shown[-1] is not None:
            shown.append(None)
    return shown


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
