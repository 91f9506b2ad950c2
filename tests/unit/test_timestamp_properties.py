"""Property tests for time bases: the generated steps of test_engine_properties, written with
epoch microseconds, integer epoch nanoseconds or a small monotonic clock, give the same
critical paths and keep every path invariant; timestamps of 1e19 and above are refused."""

from __future__ import annotations

import json
import re
import tempfile
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctda_sql.core.connection import connect
from ctda_sql.core.errors import BadTraceError
from ctda_sql.engine.analyze import analyze
from ctda_sql.engine.reports import find_report, run_report
from ctda_sql.ingest.load import ingest

from helpers.properties import StepSimulator, action
from invariants import broken_invariants

EPOCH_US = Decimal(1_700_000_000_123_456)


OFFSETS_US = {"epoch_us": EPOCH_US, "monotonic_us": Decimal(5_000_000), "huge": Decimal(10**19)}
_NUMBER_TEXT = re.compile(r'"@(-?[0-9.]+)@"')


def write_in_base(events: list[dict], path: Path, base: str) -> Path:
    """The events (ts relative to 0, whole ns as µs) written in a time base: 'epoch_us',
    'monotonic_us' or 'huge' (decimal µs text, as Kineto writes it: exact, unlike a float) or
    'epoch_ns' (integer ns since the epoch)."""
    def convert(event: dict) -> dict:
        ts = Decimal(str(event["ts"]))
        if base == "epoch_ns":
            scaled = {"ts": int((EPOCH_US + ts) * 1000)}
            if "dur" in event:
                scaled["dur"] = int(Decimal(str(event["dur"])) * 1000)
            return {**event, **scaled}
        return {**event, "ts": f"@{OFFSETS_US[base] + ts}@"}
    text = json.dumps({"schemaVersion": 1, "traceEvents": [convert(e) for e in events]})
    path.write_text(_NUMBER_TEXT.sub(r"\1", text))
    return path


def analyzed_rows(trace: Path, folder: Path) -> tuple[list, dict]:
    """(cpcr report rows, broken invariants) for a fresh warehouse holding `trace`."""
    con = connect(folder / f"{trace.stem}.duckdb")
    try:
        ingest(con, [trace], run_name="scenario", show_progress=False)
        analyze(con, show_progress=False)
        rows = run_report(con, find_report("cpcr"), {}).fetchall()
        rounded = [tuple(round(v, 3) if isinstance(v, float) else v for v in row) for row in rows]
        return rounded, broken_invariants(con)
    finally:
        con.close()


def base_events(actions: list[dict]) -> list[dict]:
    """The simulated step's events with ts from 0 and times in whole nanoseconds."""
    builder = StepSimulator().run(actions)
    base = builder.base_ts
    return [{**e, "ts": round(e["ts"] - base, 3), **({"dur": round(e["dur"], 3)} if "dur" in e else {})}
            for e in builder.events]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=1, max_size=8), st.sampled_from(["epoch_ns", "monotonic_us"]))
def test_time_base_changes_no_path_and_keeps_every_invariant(actions, base):
    events = base_events(actions)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        reference, broken = analyzed_rows(write_in_base(events, folder / "us.json", "epoch_us"), folder)
        assert broken == {}
        rows, broken = analyzed_rows(write_in_base(events, folder / f"{base}.json", base), folder)
        assert broken == {}
        assert rows == reference


def test_timestamps_of_1e19_and_above_are_refused(tmp_path):
    events = base_events([{"on_autograd": False, "name": "aten::relu", "gap_us": 1, "cpu_us": 5,
                           "launch_stream": 7, "launch_at": 0.5, "kernel_us": 9, "sync": None,
                           "overlap_us": 0, "new_step": False}])
    trace = write_in_base(events, tmp_path / "huge.json", "huge")
    con = connect(tmp_path / "w.duckdb")
    try:
        with pytest.raises(BadTraceError, match="ts out of range"):
            ingest(con, [trace], show_progress=False)
    finally:
        con.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=0, max_value=10**13), min_size=1, max_size=40),
       st.sampled_from(["epoch_us", "epoch_ns"]))
def test_ts_us_is_the_exact_time_since_the_origin_rounded_once(offsets_ns, base):
    """ts_us is computed in exact decimals and rounded to a double once, whether the file
    writes microseconds with nanosecond digits (scale 1) or integer nanoseconds (0.001)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "dur": 1,
               "ts": Decimal(offset) / 1000} for i, offset in enumerate(offsets_ns)]
    with tempfile.TemporaryDirectory() as name:
        con = connect(Path(name) / "ts.duckdb")
        try:
            ingest(con, [write_in_base(events, Path(name) / "t.json", base)], run_name="t", show_progress=False)
            origin = con.execute("SELECT origin_ts FROM runs").fetchone()[0]
            rows = con.execute("SELECT event_id, ts_us FROM events ORDER BY event_id").fetchall()
        finally:
            con.close()
    expected = [float(EPOCH_US + Decimal(offset) / 1000 - origin) for offset in offsets_ns]
    assert [ts_us for _, ts_us in rows] == expected
