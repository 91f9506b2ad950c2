"""One value as text: every digit for the text formats (no float noise, no exponent), rounded
for reading in tables, microseconds in their unit; and the display width of text."""

from __future__ import annotations

import math
from decimal import Decimal

from ctda_sql.udfs.formatting import scale_us

# significant digits of a float in a table (every digit before the point is always kept)
TABLE_DIGITS = 6
# significant digits the text formats print, and decimals they keep at least (a nanosecond of
# a µs value): a double holds 15-17, but sums and differences of a trace's µs values carry
# rounding into the 13th (0.1 + 0.2 = 0.30000000000000004; a slack_after_us is
# 288.97200000000885 for 288.972). JSON and INSERT keep every digit, for machines.
TEXT_DIGITS = 12
TEXT_DECIMALS = 3


def cell_text(value) -> str:
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


def table_cell(value) -> str:
    """A value as a table shows it. Floats, like the µs columns, are rounded for reading, to
    6 significant digits, but never lose a digit before the point nor turn into an exponent
    (1007380.5, 52051.2, 0.0901235); every other format prints every digit."""
    if not isinstance(value, float) or not math.isfinite(value) or value == 0:
        return cell_text(value)
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


def text_width(text: str) -> int:
    """Display cells `text` takes (wide characters take two)."""
    from wcwidth import wcswidth  # ~0.03 s to import: only table output measures text

    width = wcswidth(text)
    return width if width >= 0 else len(text)
