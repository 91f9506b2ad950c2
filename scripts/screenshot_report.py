"""Render an HTML report of `ctda-sql export html` to a PNG with headless Chromium, to look at
it (or to put a picture of it in the docs):

    ctda-sql export html --run nccl -o nccl.html
    python scripts/screenshot_report.py nccl.html -o docs/report-nccl.png

Needs the `chromium` binary (Debian: apt-get install chromium), or $CHROMIUM naming one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctda_sql.core.errors import CtdaError
from ctda_sql.export.chromium import render, screenshot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the HTML report")
    parser.add_argument("-o", "--output", type=Path, required=True, help="PNG to write")
    parser.add_argument("--width", type=int, default=1300, help="window width in pixels (default 1300)")
    parser.add_argument("--height", type=int, default=3300, help="window height in pixels (default 3300)")
    args = parser.parse_args(argv)
    try:
        if not args.report.is_file():
            raise CtdaError(f"{args.report}: no such file")
        errors = render(args.report).errors
        if errors:
            raise CtdaError(f"the report logged JavaScript errors: {errors[0]}")
        screenshot(args.report, args.output, args.width, args.height)
    except CtdaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
