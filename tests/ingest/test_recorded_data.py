"""The recorded traces in tests/data say nothing of the machine they were made on (issue 36):
each names itself in `traceName`, and the rewrite that did it changed nothing else."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parents[1] / "data"
sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
from trace_files import with_own_name  # noqa: E402

RECORDED = sorted(DATA.rglob("*.json.gz"))


def header(path: Path) -> dict:
    trace = json.loads(gzip.decompress(path.read_bytes()))
    return {key: value for key, value in trace.items() if key != "traceEvents"}


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: str(p.relative_to(DATA)))
def test_each_recorded_trace_names_itself_not_a_temporary_path(path):
    name = header(path).get("traceName")
    assert name in (None, path.name)


def test_the_rewrite_changes_the_trace_name_and_nothing_else():
    raw = (b'{"schemaVersion": 1, "traceEvents": [{"name": "traceName", "ph": "X", "args": '
           b'{"s": "a \\"quoted\\" /tmp/x"}}], "traceName": "/tmp/tmpab12/rank-0.json", "x": 1}')
    named = with_own_name(raw, "rank-0.json.gz")
    assert json.loads(named)["traceName"] == "rank-0.json.gz"
    assert named.replace(b'"rank-0.json.gz"', b'"/tmp/tmpab12/rank-0.json"') == raw
    assert with_own_name(b'{"traceEvents": []}', "a.json.gz") == b'{"traceEvents": []}'
