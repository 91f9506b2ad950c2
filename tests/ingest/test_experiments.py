"""Experiment metadata: `meta load` into `experiments`, --meta pairs as `run_meta` columns."""

from __future__ import annotations

import json

import pytest

from ctda_sql.testing.tracebuilder import TraceBuilder


def _trace(tmp_path, name: str, world_size: int | None = None):
    builder = TraceBuilder(rank=0, world_size=world_size)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=100)
    builder.cpu_op(main, f"op_of_{name}", ts=10, dur=20)  # distinct files, not re-loads of one
    return builder.write(tmp_path / f"{name}.json")


@pytest.fixture
def two_runs(tmp_path, run_cli):
    assert run_cli("ingest", "-q", str(_trace(tmp_path, "a")), "--run", "a", "--meta", "bs=8",
                   "--meta", "fw=fsdp").code == 0
    assert run_cli("ingest", "-q", str(_trace(tmp_path, "b")), "--run", "b", "--meta", "bs=16").code == 0
    return tmp_path


def _write_csv(path, text: str):
    path.write_text(text)
    return path


def test_meta_pairs_are_run_meta_columns(two_runs, open_db):
    rows = open_db().execute("SELECT run, bs, fw FROM run_meta ORDER BY run").fetchall()
    assert rows == [("a", 8, "fsdp"), ("b", 16, None)]


def test_run_meta_column_types_follow_the_values(two_runs, open_db):
    types = dict(open_db().execute("SELECT column_name, column_type FROM (DESCRIBE run_meta)").fetchall())
    assert types["bs"] == "BIGINT" and types["fw"] == "VARCHAR"


def test_meta_load_csv_keyed_by_run_name(two_runs, run_cli, open_db):
    path = _write_csv(two_runs / "exp.csv", "name,world_size,lr\na,4,0.1\nb,8,0.2\n")
    result = run_cli("meta", "load", str(path), "--key", "name")
    assert result.code == 0 and "loaded 2" in result.out
    rows = open_db().execute("SELECT run, world_size, lr FROM experiments ORDER BY run").fetchall()
    assert rows == [("a", 4, 0.1), ("b", 8, 0.2)]


def test_meta_load_reads_a_file_whose_name_holds_glob_characters(two_runs, run_cli, open_db):
    """DuckDB expands * ? [ ] in the paths its readers get: `exp[1].csv` is read as itself,
    not as the pattern that matches `exp1.csv` beside it."""
    _write_csv(two_runs / "exp1.csv", "name,world_size\nb,99\n")
    path = _write_csv(two_runs / "exp[1].csv", "name,world_size\na,4\n")
    result = run_cli("meta", "load", str(path), "--key", "name")
    assert result.code == 0, result.err
    assert open_db().execute("SELECT run, world_size FROM experiments").fetchall() == [("a", 4)]


def test_reloading_updates_rows_and_keeps_other_columns(two_runs, run_cli, open_db):
    run_cli("meta", "load", str(_write_csv(two_runs / "exp.csv", "name,world_size,lr\na,4,0.1\n")), "--key", "name")
    newer = two_runs / "newer.json"
    newer.write_text(json.dumps([{"name": "a", "world_size": 16, "cluster": "x"}, {"name": "b", "world_size": 2}]))
    assert run_cli("meta", "load", str(newer), "--key", "name").code == 0
    rows = open_db().execute("SELECT run, world_size, lr, cluster FROM experiments ORDER BY run").fetchall()
    assert rows == [("a", 16, 0.1, "x"), ("b", 2, None, None)]


def test_meta_load_parquet(two_runs, run_cli, open_db):
    path = two_runs / "exp.parquet"
    with open_db(read_only=False) as con:
        con.execute(f"COPY (SELECT 'a' AS run_name, 'h100' AS gpu) TO '{path}' (FORMAT parquet)")
    assert run_cli("meta", "load", str(path), "--key", "run_name").code == 0
    assert open_db().execute("SELECT gpu FROM experiments WHERE run = 'a'").fetchone() == ("h100",)


def test_experiments_join_runs_through_run_attributes(two_runs, run_cli, open_db):
    run_cli("meta", "load", str(_write_csv(two_runs / "exp.csv", "name,batch\na,32\n")), "--key", "name")
    rows = open_db().execute(
        "SELECT run, source, value FROM run_attributes WHERE key IN ('batch', 'bs') ORDER BY run, source"
    ).fetchall()
    assert rows == [("a", "experiments", "32"), ("a", "meta", "8"), ("b", "meta", "16")]


@pytest.mark.parametrize("name, content, key, message", [
    ("missing.csv", None, "name", "no such file"),
    ("exp.csv", "name,lr\na,1\n", "run_name", "no column 'run_name'"),
    ("exp.txt", "name\n", "name", "unsupported file type .txt"),
    ("exp.csv", "name,lr\na,1\na,2\n", "name", "repeats the value 'a'"),
])
def test_meta_load_errors_are_one_line(tmp_path, run_cli, name, content, key, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    result = run_cli("meta", "load", str(path), "--key", key)
    assert result.code == 1
    assert message in result.err and len(result.err.strip().splitlines()) == 1


def test_runs_without_meta_give_a_run_meta_of_names(tmp_path, run_cli, open_db):
    assert run_cli("ingest", "-q", str(_trace(tmp_path, "plain"))).code == 0
    assert open_db().execute("SELECT run FROM run_meta").fetchall() == [("plain",)]
