"""Render an HTML report in headless Chromium: the DOM after its scripts ran, the console
messages they logged, or a PNG. Used by the tests and scripts/screenshot_report.py; needs
the `chromium` binary (Debian package `chromium`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ctda_sql.core.errors import CtdaError

_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
# Chromium logs console output as `...:INFO:CONSOLE:12] "message", source: URL (12)`
_CONSOLE = re.compile(r":(?P<level>[A-Z]+):CONSOLE[^\]]*\] \"(?P<message>.*)\", source:")
_SETTLE_MS = 15000  # virtual time the page's scripts get before the DOM is read


@dataclass
class Rendered:
    dom: str
    console: list[tuple[str, str]]  # (level, message)

    @property
    def errors(self) -> list[str]:
        """Uncaught exceptions and console.error messages."""
        return [m for level, m in self.console if level == "ERROR" or m.startswith("Uncaught")]


def find_chromium() -> str | None:
    explicit = os.environ.get("CHROMIUM")
    return explicit or next((found for name in _NAMES if (found := shutil.which(name))), None)


def _run(binary: str | None, page: Path, extra: list[str], timeout: float) -> subprocess.CompletedProcess:
    binary = binary or find_chromium()
    if binary is None:
        raise CtdaError("chromium is not installed (Debian: apt-get install chromium)")
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--enable-logging=stderr", "--v=0", f"--virtual-time-budget={_SETTLE_MS}",
               *extra, page.resolve().as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def render(page: Path, binary: str | None = None, timeout: float = 180) -> Rendered:
    """The page's DOM once its scripts settled, and what they logged to the console."""
    done = _run(binary, page, ["--dump-dom"], timeout)
    console = [(m["level"], m["message"]) for m in _CONSOLE.finditer(done.stderr)]
    return Rendered(dom=done.stdout, console=console)


def screenshot(page: Path, png: Path, width: int = 1300, height: int = 3000,
               binary: str | None = None, timeout: float = 180) -> Path:
    done = _run(binary, page, [f"--window-size={width},{height}", f"--screenshot={png.resolve()}"], timeout)
    if not png.exists():
        raise CtdaError(f"chromium wrote no screenshot: {done.stderr.strip().splitlines()[-1:]}")
    return png
