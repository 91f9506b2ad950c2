"""The command line as users meet it: the installed script, one-line errors, the HTML report in a
browser."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from ctda_sql.export.chromium import find_chromium

from helpers.traces import two_rank_folder


def console_script() -> str:
    """The installed `ctda-sql` script (beside this interpreter when PATH lacks it)."""
    found = shutil.which("ctda-sql") or Path(sys.executable).with_name("ctda-sql")
    assert Path(found).exists(), "the ctda-sql console script is not installed"
    return str(found)


def ingest_fig(run_cli, tmp_path: Path, analyze: bool) -> None:
    """The two-rank figure-1 run `fig` in the CLI's test database."""
    assert run_cli("ingest", "-q", str(two_rank_folder(tmp_path / "fig")), "--run", "fig").code == 0
    if analyze:
        assert run_cli("analyze", "-q").code == 0


def assert_one_error_line(result, message: str) -> None:
    assert result.code == 1 and result.err.startswith("error: ") and message in result.err
    assert len(result.err.strip().splitlines()) == 1


def chromium_or_skip() -> str:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return binary
