"""Other dialects: Postgres SQL transpiled by sqlglot into DuckDB SQL that gives Postgres' answer."""

from __future__ import annotations

import json

import pytest

from ctda_sql.core.dialect import to_duckdb
from ctda_sql.core.errors import CtdaError
from ctda_sql.testing.tracebuilder import TraceBuilder

STEPS = {"steps": {"step": "BIGINT", "dur_us": "DOUBLE"}}


@pytest.fixture
def warehouse(tmp_path, run_cli):
    builder = TraceBuilder(rank=0)
    main = builder.thread(100, "pt_main_thread")
    start = 0
    for number, duration in enumerate([10, 20, 30, 40, 100], start=1):
        builder.step(number, main, ts=start, dur=duration)  # back to back: steps partition time
        start += duration
    assert run_cli("ingest", "-q", str(builder.write(tmp_path / "t.json"))).code == 0


def query_json(run_cli, sql: str, dialect: str = "postgres"):
    result = run_cli("query", "--dialect", dialect, "--format", "json", sql)
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_duckdb_sql_is_left_alone():
    assert to_duckdb("SELECT 7 / 2", "duckdb") == "SELECT 7 / 2"


def test_postgres_integer_division_keeps_postgres_semantics():
    # Postgres: 7 / 2 = 3 and -7 / 2 = -3 (truncation); DuckDB's `/` would give 3.5 and -3.5
    sql = to_duckdb("SELECT FLOOR(step / 50) * 50 AS bucket FROM steps", "postgres", STEPS)
    assert "TRUNC(step / 50)" in sql
    import duckdb

    rows = duckdb.sql(sql.replace("FROM steps", "FROM (VALUES (149), (-149), (50)) AS steps(step)")).fetchall()
    assert [row[0] for row in rows] == [100, -100, 50]


def test_integer_literals_divide_as_integers():
    import duckdb

    assert duckdb.sql(to_duckdb("SELECT 7 / 2 AS a, -7 / 2 AS b, 7.0 / 2 AS c", "postgres")).fetchall() == [(3, -3, 3.5)]


def test_double_columns_keep_real_division():
    assert to_duckdb("SELECT dur_us / 2 FROM steps", "postgres", STEPS) == "SELECT dur_us / 2 FROM steps"


def test_floor_bucket_runs_on_the_warehouse(warehouse, run_cli):
    rows = query_json(run_cli, "SELECT FLOOR(step / 2) * 2 AS bucket, count(*) AS n FROM steps GROUP BY 1 ORDER BY 1")
    assert rows == [{"bucket": 0, "n": 1}, {"bucket": 2, "n": 2}, {"bucket": 4, "n": 2}]


def test_percentile_cont_within_group(warehouse, run_cli):
    assert "QUANTILE_CONT" in to_duckdb(
        "SELECT PERCENTILE_CONT(0.95) WITHIN GROUP (ORDER BY dur_us) FROM steps", "postgres")
    rows = query_json(run_cli, "SELECT PERCENTILE_CONT(0.95) WITHIN GROUP (ORDER BY dur_us) AS p95 FROM steps")
    # Postgres: linear interpolation between 40 and 100 at 0.95 * (5 - 1) = 3.8
    assert rows[0]["p95"] == pytest.approx(88.0)


def test_stddev_is_the_sample_deviation(warehouse, run_cli):
    rows = query_json(run_cli, "SELECT STDDEV(dur_us) AS s FROM steps")
    assert rows[0]["s"] == pytest.approx(35.355339, rel=1e-6)  # Postgres' stddev_samp


def test_explain_sql_prints_the_duckdb_sql(warehouse, run_cli):
    result = run_cli("query", "--dialect", "postgres", "--explain-sql", "SELECT FLOOR(step / 50) * 50 FROM steps")
    assert result.code == 0 and "TRUNC(step / 50)" in result.out


def test_explain_sql_works_without_a_database(run_cli, tmp_path):
    result = run_cli("query", "--dialect", "postgres", "--explain-sql", "SELECT 1::text", db=tmp_path / "none.duckdb")
    assert result.code == 0 and "CAST(1 AS TEXT)" in result.out


@pytest.mark.parametrize("sql, dialect, message", [
    ("SELECT FROM WHERE (", "postgres", "cannot parse the postgres SQL"),
    ("SELECT 1", "klingon", "unknown dialect 'klingon'"),
])
def test_bad_input_is_a_clear_error(sql, dialect, message):
    with pytest.raises(CtdaError, match=message):
        to_duckdb(sql, dialect)


def test_mysql_backticks(warehouse, run_cli):
    assert query_json(run_cli, "SELECT count(*) AS n FROM `steps`", dialect="mysql") == [{"n": 5}]
