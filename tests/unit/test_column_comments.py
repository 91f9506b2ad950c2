"""Every table and column of the warehouse (sql/schema/, the contract) carries a description that
`.schema TABLE` and any DuckDB client show: a table or column added without a COMMENT in
sql/comments.sql fails here."""

from __future__ import annotations

import pytest

from ctda_sql.core.connection import PUBLIC_TABLES, connect, undescribed_columns
from ctda_sql.ingest.experiments import load_experiments

# `meta load` re-creates experiments with the user's columns (no comments): left out of
# PUBLIC_TABLES, so its table and key column are checked on a fresh warehouse only.
USER_DEFINED = {"experiments"}


def _tables(con) -> set[str]:
    rows = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                       "AND schema_name = 'main'").fetchall()
    return {row[0] for row in rows}


def _missing_comments(con) -> list[tuple[str, str]]:
    """(table, column) of every table of the database without a comment; '' is the table."""
    return con.execute(
        "SELECT table_name, '' FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND comment IS NULL "
        "UNION ALL SELECT table_name, column_name FROM duckdb_columns() "
        "WHERE database_name = current_database() AND schema_name = 'main' AND comment IS NULL "
        "AND table_name IN (SELECT table_name FROM duckdb_tables()) ORDER BY 1, 2").fetchall()


def test_every_public_table_and_column_has_a_comment(tmp_path):
    con = connect(tmp_path / "t.duckdb")
    try:
        assert set(PUBLIC_TABLES) <= _tables(con)
        assert undescribed_columns(con) == []
    finally:
        con.close()


def test_every_table_of_a_fresh_warehouse_is_described_and_checked(tmp_path):
    con = connect(tmp_path / "t.duckdb")
    try:
        assert _missing_comments(con) == []
        # a table added later must join PUBLIC_TABLES, so older databases get its comments
        assert _tables(con) - USER_DEFINED == set(PUBLIC_TABLES)
    finally:
        con.close()


def test_loaded_experiment_columns_do_not_count_as_undescribed(tmp_path):
    path = tmp_path / "t.duckdb"
    (tmp_path / "exp.csv").write_text("run,lr\na,0.1\n")
    con = connect(path)
    load_experiments(con, tmp_path / "exp.csv", "run")
    assert ("experiments", "lr") in _missing_comments(con)
    assert undescribed_columns(con) == []
    con.close()
    con = connect(path)
    try:
        assert undescribed_columns(con) == []
    finally:
        con.close()


def test_a_database_from_before_the_comments_gets_them_on_the_next_writable_open(tmp_path):
    path = tmp_path / "t.duckdb"
    con = connect(path)
    con.execute("COMMENT ON COLUMN events.name IS NULL")
    con.execute("COMMENT ON TABLE comm_model IS NULL")
    # such a database was made by an older ctda-sql: its schema fingerprint differs
    con.execute("UPDATE schema_version SET fingerprint = 'older'")
    assert undescribed_columns(con) == [("comm_model", ""), ("events", "name")]
    con.close()
    con = connect(path)
    try:
        assert undescribed_columns(con) == []
    finally:
        con.close()


def test_a_database_file_is_always_described_even_when_asked_for_a_scratch_one(tmp_path):
    """Only the lake tasks' in-memory warehouses skip the comments; a file never does, since
    its stored schema fingerprint would keep later opens from adding them."""
    with pytest.raises(ValueError):
        connect(tmp_path / "t.duckdb", scratch=True)
    assert not (tmp_path / "t.duckdb").exists()
    scratch = connect(":memory:", scratch=True)
    try:
        assert set(PUBLIC_TABLES) <= _tables(scratch)
    finally:
        scratch.close()
