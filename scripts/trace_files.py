"""Write recorded traces into tests/data without the machine they were made on: Kineto puts
the path it exported to (a temporary folder) in `traceName`; the committed file says its own
name there instead, and nothing else changes (a textual edit, not a JSON round trip, so every
other byte of the trace stays as recorded).

    python scripts/trace_files.py FILE.json.gz...   # rewrite committed traces in place
"""

from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

TRACE_NAME = re.compile(rb'("traceName"\s*:\s*)"(?:[^"\\]|\\.)*"')


def with_own_name(raw: bytes, name: str) -> bytes:
    """`raw` (a Kineto JSON trace) with its traceName set to `name`; unchanged without one.
    Kineto writes the key last, after the events: the last match is the top-level one."""
    matches = list(TRACE_NAME.finditer(raw))
    if not matches:
        return raw
    last = matches[-1]
    return raw[:last.start()] + last.group(1) + b'"' + name.encode() + b'"' + raw[last.end():]


def gzip_trace(raw_json: Path, out: Path) -> None:
    """Compress the exported trace `raw_json` to `out`, naming `out` in its traceName."""
    with gzip.open(out, "wb", compresslevel=9) as dst:
        dst.write(with_own_name(raw_json.read_bytes(), out.name))


def rewrite(path: Path) -> bool:
    """Give the committed trace `path` its own name; True when it changed."""
    raw = gzip.decompress(path.read_bytes())
    named = with_own_name(raw, path.name)
    if named == raw:
        return False
    with gzip.open(path, "wb", compresslevel=9) as dst:
        dst.write(named)
    return True


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"{arg}: {'renamed' if rewrite(Path(arg)) else 'already named'}")
