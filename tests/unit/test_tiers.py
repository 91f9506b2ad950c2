"""The test tiers: conftest.py marks what needs $CTDA_TRACES (shared), what needs a tool .ci/run
installs (ci_only) and what is measured slow, so that `-m "not slow and not shared and not
ci_only"` is the fast tier and a plain `python -m pytest` still runs everything."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import conftest


@dataclass
class FakeItem:
    """What the hook reads of a collected test."""
    name: str
    fixturenames: list[str]
    function: object
    path: Path = Path("tests/test_x.py")
    markers: list[str] = field(default_factory=list)

    def add_marker(self, mark) -> None:
        self.markers.append(mark.name)


def plain_test():
    pass


def renders_in_chromium():
    chromium_or_skip()  # noqa: F821 (only read, never run)


def marks(item: FakeItem) -> list[str]:
    conftest.pytest_collection_modifyitems(None, [item])
    return sorted(item.markers)


def test_a_test_that_reads_the_shared_traces_is_marked_shared():
    assert marks(FakeItem("t", ["shared_traces", "tmp_path"], plain_test)) == ["shared"]


def test_a_test_that_needs_a_tool_ci_installs_is_marked_ci_only():
    assert marks(FakeItem("t", ["tmp_path"], renders_in_chromium)) == ["ci_only"]
    assert marks(FakeItem("t", ["wheel"], plain_test)) == ["ci_only"]
    assert marks(FakeItem("t", ["simgrid", "shared_traces"], plain_test)) == ["ci_only", "shared"]


def test_slow_tests_are_marked_by_module_or_name(monkeypatch):
    monkeypatch.setattr(conftest, "SLOW_MODULES", {"test_big.py"})
    monkeypatch.setattr(conftest, "SLOW_TESTS", {"test_x.py::test_long"})
    assert marks(FakeItem("test_a", [], plain_test, Path("tests/test_big.py"))) == ["slow"]
    assert marks(FakeItem("test_long", [], plain_test)) == ["slow"]
    assert marks(FakeItem("test_short", ["tmp_path"], plain_test)) == []
    assert marks(FakeItem("test_long", [], plain_test, Path("tests/test_other.py"))) == []
