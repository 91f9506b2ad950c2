"""Database files that the DuckDB of our users opens: DuckDB 1.4 and 1.5 (CLI, pandas) read
storage versions 64 to 68; DuckDB 2.0's own format (999) they refuse."""

from __future__ import annotations

import struct
import subprocess

import pytest

from ctda_sql.testing.tracebuilder import TraceBuilder

from shell_helpers import ctda_command

# what DuckDB 1.5.6 answers for newer files: "we can only read versions between 64 and 68"
READABLE_BY_DUCKDB_1_4_AND_1_5 = range(64, 69)


def storage_version(path) -> int:
    header = path.read_bytes()[:20]
    assert header[8:12] == b"DUCK"
    return struct.unpack("<Q", header[12:20])[0]


def ctda(db, *words: str, stdin: str | None = None):
    return subprocess.run([*ctda_command(), "--db", str(db), *words], input=stdin, capture_output=True, text=True,
                          timeout=120)


def test_ingest_writes_a_file_older_duckdb_versions_open(tmp_path):
    builder = TraceBuilder(rank=0, world_size=1)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=100)
    builder.cpu_op(main, "aten::relu", ts=10, dur=20)
    db = tmp_path / "t.duckdb"
    assert ctda(db, "ingest", "-q", str(builder.write(tmp_path / "t.json"))).returncode == 0
    assert ctda(db, "analyze", "-q").returncode == 0
    assert storage_version(db) in READABLE_BY_DUCKDB_1_4_AND_1_5


@pytest.mark.parametrize("words", [("shell",), ("meta", "load", "{csv}", "--key", "run")])
def test_other_commands_creating_the_file_use_the_same_format(tmp_path, words):
    csv = tmp_path / "experiments.csv"
    csv.write_text("run,batch\nr1,8\n")
    db = tmp_path / "t.duckdb"
    done = ctda(db, *(w.format(csv=csv) for w in words), stdin="CREATE TABLE notes AS SELECT 1 AS a;\n")
    assert done.returncode == 0, done.stderr
    assert storage_version(db) in READABLE_BY_DUCKDB_1_4_AND_1_5
