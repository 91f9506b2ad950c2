"""The boxed table, like DuckDB's duckbox, fitted to a width.

What a user reads a table for is never cut or dropped: numbers and their units stay whole, a
report's key columns (its header's `-- key:` line) are the last to go, names the user types
next (runs, reports, parameters) are never cut, prose (notes, reasons, descriptions) wraps,
long C++ names lose their template arguments before anything else, and names left alike by a
cut are numbered. The footer names every hidden column.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Collection
from datetime import date, datetime, time, timedelta
from decimal import Decimal

from ctda_sql.cli.cells import readable_us, table_cell, text_width

# text columns are never squeezed narrower than this to make a table fit (unless their text is),
# the one that names the rows (the widest) never narrower than FIRST_TEXT_WIDTH
MIN_TEXT_WIDTH = 16
FIRST_TEXT_WIDTH = 28
# columns whose prose wraps onto more lines rather than being cut
WRAPPED_COLUMNS = {"description", "comment", "help", "params", "parameters", "note", "rule", "reason", "why", "fix", "evidence"}
# columns naming what the user types next (--param run=NAME, report NAME): never cut
WHOLE_COLUMNS = {"run", "run_a", "run_b", "report", "parameter", "param"}
# a text column of identifiers only (report names, methods, categories) is never cut either,
# up to this width
WHOLE_NAME_WIDTH = 32
# columns that hold the answer wherever they appear (what-if's speedup), kept like key columns
ANSWER_COLUMNS = {"speedup"}
ELLIPSIS = "…"
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*\Z")


def table(columns: list[str], rows: list[tuple], width: int | None = None, total: int | None = None,
          keys: Collection[str] = ()) -> str:
    """The rows as a boxed table no wider than `width`; `keys` name the columns dropped last."""
    total = len(rows) if total is None else total
    us_columns = {i for i, c in enumerate(columns) if c.endswith("_us")}
    cells = [[readable_us(v) if i in us_columns and v is not None else table_cell(v) for i, v in enumerate(row)]
             for row in rows]
    right = {i for i in range(len(columns)) if _numeric(rows, i)}
    # columns never cut: numbers, durations with their unit, times
    numbers = right | {i for i in range(len(columns)) if _timelike(rows, i)} | \
        {i for i in us_columns if all(r[i] is None for r in rows)}
    wrapped = {i for i, c in enumerate(columns) if c.lower() in WRAPPED_COLUMNS and i not in numbers}

    def natural_width(index: int, text: str) -> int:
        lines = text.split("\n") if index in wrapped else [text.replace("\n", "\\n")]
        return max(text_width(line) for line in lines)

    natural = [max([text_width(c)] + [natural_width(i, r[i]) for r in cells]) for i, c in enumerate(columns)]
    whole = numbers | {i for i, c in enumerate(columns) if i not in wrapped and _is_whole(c, [r[i] for r in cells])}
    naming = _naming_column(natural, whole | wrapped)
    floor = [natural[i] if i in whole else min(natural[i], _floor(i, naming, wrapped, cells)) for i in range(len(columns))]
    first = [i for i, c in enumerate(columns) if c in keys or c.lower() in ANSWER_COLUMNS]
    shown, widths = _fit(natural, floor, width, first, naming)
    texts = {i: _cut_column([r[i] for r in cells], widths[i]) for i in shown if i is not None and i not in wrapped}

    def lines_of(row: int | None) -> list[str]:
        parts = {}
        for index in (i for i in shown if i is not None):
            if row is None:
                parts[index] = [_clip(columns[index], widths[index])]
            elif index in wrapped:
                parts[index] = _wrap(cells[row][index], widths[index])
            else:
                parts[index] = [texts[index][row]]
        height = max((len(p) for p in parts.values()), default=1)
        out = []
        for number in range(height):
            pieces = []
            for index in shown:
                if index is None:
                    pieces.append(ELLIPSIS if number == 0 else " ")
                    continue
                text = parts[index][number] if number < len(parts[index]) else ""
                pad = " " * (widths[index] - text_width(text))
                pieces.append(pad + text if index in right else text + pad)
            out.append("│ " + " │ ".join(pieces) + " │")
        return out

    def rule(left: str, middle: str, end: str) -> str:
        return left + middle.join("─" * ((1 if i is None else widths[i]) + 2) for i in shown) + end

    lines = [rule("┌", "┬", "┐"), *lines_of(None), rule("├", "┼", "┤")]
    for row in range(len(cells)):
        lines += lines_of(row)
    lines.append(rule("└", "┴", "┘"))
    hidden = [columns[i] for i in range(len(columns)) if i not in shown]
    lines.append(_footer(total, len(rows), hidden, width))
    return "\n".join(lines)


def _numeric(rows, index: int) -> bool:
    values = [row[index] for row in rows if row[index] is not None]
    return bool(values) and all(isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in values)


def _timelike(rows, index: int) -> bool:
    values = [row[index] for row in rows if row[index] is not None]
    return bool(values) and all(isinstance(v, (datetime, date, time, timedelta)) for v in values)


def _is_whole(column: str, texts: list[str]) -> bool:
    """A column of names the user types next: runs, reports, parameters, identifiers."""
    if column.lower() in WHOLE_COLUMNS:
        return True
    names = [t for t in texts if t != "NULL"]
    return bool(names) and all(_IDENTIFIER.match(t) and len(t) <= WHOLE_NAME_WIDTH for t in names)


def _floor(index: int, naming: int | None, wrapped: set[int], cells: list[list[str]]) -> int:
    """How narrow a text column may get: prose no narrower than its longest word (a parameter's
    name), up to the naming column's floor."""
    if index in wrapped:
        longest = max((text_width(word) for row in cells for word in row[index].split()), default=0)
        return max(MIN_TEXT_WIDTH, min(longest, FIRST_TEXT_WIDTH))
    return FIRST_TEXT_WIDTH if index == naming else MIN_TEXT_WIDTH


def _naming_column(natural: list[int], not_naming: set[int]) -> int | None:
    """The text column that names the rows (op or kernel names): the widest that is neither
    prose nor kept whole, the first of equals. It keeps the most width and gets the slack first."""
    texts = [i for i in range(len(natural)) if i not in not_naming]
    return max(texts, key=lambda i: (natural[i], -i)) if texts else None


# ---- fitting the width -----------------------------------------------------------------------

def _fit(natural: list[int], floor: list[int], width: int | None, keys: list[int],
         naming: int | None) -> tuple[list[int | None], list[int]]:
    """(columns to show, None standing for the … column; their widths) within `width`.

    Text columns shrink to their floor; when the floors do not fit, columns go, the key
    columns last, then the naming column; what width is left goes to the naming column
    first, then to the other text columns by what each lacks."""
    indexes = list(range(len(natural)))
    if not width or _table_width(natural) <= width:
        return indexes, natural
    first = keys + ([naming] if naming is not None else [])
    shown = indexes if _table_width(floor) <= width else _drop(floor, width, first)
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
    wanting = {i: natural[i] - widths[i] for i in kept if natural[i] > widths[i]}
    lacking = sum(wanting.values())
    for index, want in wanting.items():
        extra = min(want, slack * want // lacking) if lacking > slack else want
        widths[index] += extra
    return shown, widths


def _table_width(widths: list[int]) -> int:
    return sum(widths) + 3 * len(widths) + 1


def _shown_width(shown: list[int | None], widths: list[int]) -> int:
    return _table_width([1 if i is None else widths[i] for i in shown])


def _drop(widths: list[int], width: int, first: list[int]) -> list[int | None]:
    """The columns of `first` (key columns, then the naming column) that fit, then the
    columns from the left while they fit, then from the right while they still do; a …
    column stands for each run left out."""
    chosen: set[int] = set()

    def fits(extra: int) -> bool:
        return _shown_width(_with_gaps(chosen | {extra}, len(widths)), widths) <= width

    for index in first:
        if fits(index):
            chosen.add(index)
    if first and not chosen:  # nothing fits whole: the naming column, shrunk to the width
        chosen.add(first[-1])
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


# ---- cutting names ---------------------------------------------------------------------------

def _cut_column(texts: list[str], width: int) -> list[str]:
    """Each text cut to `width`; different texts that the cut leaves alike are numbered
    ('… [1]', '… [2]'), so two kernels never print the same."""
    cut = [_shorten(text, width) for text in texts]
    sources: dict[str, set[str]] = {}
    for text, short in zip(texts, cut):
        sources.setdefault(short, set()).add(text)
    alike = {short for short, found in sources.items() if len(found) > 1}
    room = width - text_width(f" [{len(texts)}]")
    if not alike or room < 2:  # a column too narrow for a number keeps its cut
        return cut
    numbers: dict[str, dict[str, int]] = {}
    for i, (text, short) in enumerate(zip(texts, cut)):
        if short in alike:
            base = _shorten(text, max(room, 1))
            number = numbers.setdefault(base, {}).setdefault(text, len(numbers[base]) + 1)
            cut[i] = f"{base} [{number}]"
    return cut


def _shorten(text: str, width: int) -> str:
    """`text` in `width` cells: a C++ name first loses the inside of its template arguments,
    then of its parameter list, deepest first ('void at::native::kernel<…>(…)'), then its
    return type and its parameter list ('at::native::kernel<…>'); what is still too long
    loses its middle."""
    text = text.replace("\n", "\\n")
    if text_width(text) <= width:
        return text
    for shorter in _collapsed(text):
        text = shorter
        if text_width(text) <= width:
            return text
    return _clip(text, width)


def _collapsed(text: str):
    """`text` ever shorter: bracket groups emptied to '…', at each depth from the deepest up
    its <…> groups, then its (…) groups; then without a leading 'void ', then without its
    parameter list."""
    groups = _bracket_groups(text)
    if not groups:
        return
    for depth in range(max(g[2] for g in groups), -1, -1):
        for kinds in ("<", "<("):
            chosen = [g for g in groups if g[2] > depth or (g[2] == depth and g[3] in kinds)]
            yield _emptied(text, chosen)
    text = _emptied(text, groups).removeprefix("void ")
    yield text
    yield text.removesuffix("(…)")


def _bracket_groups(text: str) -> list[tuple[int, int, int, str]]:
    """(opening index, closing index, depth, '<' or '(') of each matched, non-empty group; an
    arrow's '>' ('Device -> Device') or a lone '<' matches nothing."""
    stack: list[tuple[int, str]] = []
    groups = []
    for index, char in enumerate(text):
        if char in "<(":
            stack.append((index, char))
        elif stack and (char, stack[-1][1]) in ((">", "<"), (")", "(")):
            start, kind = stack.pop()
            if index > start + 1:
                groups.append((start, index, len(stack), kind))
    return groups


def _emptied(text: str, groups: list[tuple[int, int, int, str]]) -> str:
    pieces, end = [], 0
    for start, close, _, _ in sorted(groups):
        if start < end:
            continue  # inside a group already emptied
        pieces += [text[end:start + 1], ELLIPSIS]
        end = close
    return "".join(pieces) + text[end:]


def _take(chars, width: int) -> str:
    """The leading characters of `chars` that fill at most `width` display cells."""
    kept, used = [], 0
    for char in chars:
        size = max(text_width(char), 0)
        if used + size > width:
            break
        kept.append(char)
        used += size
    return "".join(kept)


def _clip(text: str, width: int) -> str:
    """`text` cut to `width` display cells in the middle, where long names repeat themselves:
    'autograd::engine::evaluate_function: torch::autograd::AccumulateGrad' -> 'autograd::…AccumulateGrad'."""
    text = text.replace("\n", "\\n")
    if text_width(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = _take(text, (width - 1) // 2)
    tail = _take(reversed(text), width - 1 - text_width(head))[::-1]
    return head + ELLIPSIS + tail


def _wrap(text: str, width: int) -> list[str]:
    """`text` as lines of at most `width` cells, broken at spaces (descriptions, parameters)."""
    lines = []
    for paragraph in text.split("\n"):
        lines += textwrap.wrap(paragraph, width, break_on_hyphens=False, break_long_words=False) or [""]
    return [_clip(line, width) for line in lines]


def _footer(total: int, shown_rows: int, hidden: list[str], width: int | None) -> str:
    """'(6 rows; 2 columns hidden: a, b)', every hidden column named: wrapped, never cut."""
    text = f"({total:,} row{'s' if total != 1 else ''}"
    if shown_rows < total:
        text += f", {shown_rows:,} shown"
    if hidden:
        text += f"; {len(hidden)} column{'s' if len(hidden) != 1 else ''} hidden: {', '.join(hidden)}"
    text += ")"
    if not width or text_width(text) <= width:
        return text
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False))
