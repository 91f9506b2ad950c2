"""Benchmarks write what they print as JSON beside bench/RESULTS.md (bench/common.py), so a
result can be compared between runs without reading a printed table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH_COMMON = Path(__file__).resolve().parents[2] / "bench" / "common.py"


def load_bench_common():
    """A fresh copy of bench/common.py (no tables kept from another test)."""
    spec = importlib.util.spec_from_file_location("bench_common_under_test", BENCH_COMMON)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_printed_table_is_written_as_json_beside_results_md(tmp_path, monkeypatch, capsys):
    common = load_bench_common()
    assert common.results_json_path("bench/bench_whatif.py") == BENCH_COMMON.parent / "bench_whatif.json"
    monkeypatch.setattr(common, "BENCH_DIR", tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench/bench_x.py", "--trace", "nccl"])
    common.print_table(["trace", "ingest s"], [["nccl", "1.250"], ["cpu_only", "-"]])
    first = json.loads((tmp_path / "bench_x.json").read_text())
    common.print_table(["report", "rows"], [["top_ops", 12]])
    written = json.loads((tmp_path / "bench_x.json").read_text())

    assert "nccl      1.250" in capsys.readouterr().out  # the printed table is unchanged
    assert first["tables"] == written["tables"][:1]  # a run stopped here keeps its first table
    assert written["argv"] == ["bench/bench_x.py", "--trace", "nccl"] and written["finished_utc"].endswith("Z")
    assert written["tables"] == [
        {"headers": ["trace", "ingest s"],
         "rows": [{"trace": "nccl", "ingest s": "1.250"}, {"trace": "cpu_only", "ingest s": "-"}]},
        {"headers": ["report", "rows"], "rows": [{"report": "top_ops", "rows": 12}]},
    ]
