"""Every table and column of the warehouse carries a description that `.schema TABLE` and any
DuckDB client show, written once, beside its definition in the schema files (sql/schema.sql,
sql/schema/; core/column_docs.py reads them into COMMENT ON): a table or column added without
one fails here, with its name."""

from __future__ import annotations

import pytest

from ctda_sql.core import column_docs, sqlfiles
from ctda_sql.core.column_docs import SchemaDocError, TableDoc, read_docs, schema_docs
from ctda_sql.core.connection import USER_COLUMNS_TABLES, connect, public_tables, undescribed_columns
from ctda_sql.ingest.experiments import load_experiments


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


def _shown(con) -> dict[tuple[str, str], str | None]:
    """(table, column) -> the description DuckDB shows, for every table and column of the
    database; '' is the table."""
    rows = con.execute(
        "SELECT table_name, '', comment FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' UNION ALL SELECT table_name, column_name, comment FROM duckdb_columns() "
        "WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name IN (SELECT table_name FROM duckdb_tables())").fetchall()
    return {(table, column): comment for table, column, comment in rows}


def _written() -> dict[tuple[str, str], str]:
    """(table, column) -> its description in the schema files; '' is the table."""
    written = {}
    for table, doc in schema_docs().items():
        written[(table, "")] = doc.description
        written.update({(table, column): text for column, text in doc.columns.items()})
    return written


@pytest.fixture
def fresh(tmp_path):
    con = connect(tmp_path / "t.duckdb")
    yield con
    con.close()


def test_every_public_table_and_column_has_a_comment(fresh):
    assert set(public_tables()) <= _tables(fresh)
    assert undescribed_columns(fresh) == []


def test_every_table_of_a_fresh_warehouse_is_described_and_checked(fresh):
    assert _missing_comments(fresh) == []
    assert _tables(fresh) - set(USER_COLUMNS_TABLES) == set(public_tables())


def test_every_column_duckdb_has_is_described_in_the_schema_files(fresh):
    """Also the columns an ALTER TABLE adds; a column missing from the files is named here."""
    written = _written()
    assert sorted(key for key in _shown(fresh) if key not in written) == []
    assert sorted(key for key in written if key not in _shown(fresh)) == []


def test_the_descriptions_duckdb_shows_are_the_schema_files(fresh):
    shown, written = _shown(fresh), _written()
    assert {key: (shown[key], text) for key, text in written.items() if shown[key] != text} == {}


@pytest.mark.parametrize(("table", "column", "text"), [
    ("runs", "origin_ts", "epoch microseconds subtracted from every raw timestamp of the run"),
    ("runs", "", "one row per ingested run (a job: one or more rank files)"),
    ("traces", "schema_version", "the file's schemaVersion"),
    # added by an ALTER TABLE in sql/schema/crossrank.sql, its description on three lines
    ("traces", "clock_offset_us", "estimated clock offset against the run's lowest rank, microseconds "
     "(subtract to align; NULL: no estimate): the median over matched collectives of how much later "
     "this rank's clock says they ended"),
    # a column that a CREATE TABLE defines and an ALTER TABLE adds to older databases
    ("whatif_steps", "replay_end_us", "where the step ends in the unchanged replay (replay_start_us + "
     "replay_us), microseconds from the replay's origin; NULL: stored before this column"),
    ("whatif_path", "node_step", "step (window) of node_rank the node belongs to (nodes.step)"),
    ("events", "args", "the event's args object (JSON)"),  # its trailing note is not shown
    ("experiments", "run", "run name (runs.name)"),
    ("schema_version", "", "internal: fingerprint of the schema this database was last set up with"),
])
def test_a_description_by_hand(fresh, table, column, text):
    assert _shown(fresh)[(table, column)] == text


def test_every_table_and_column_of_the_schema_files_has_exactly_one_description():
    """read_docs raises for a missing or second description; here every file is read again
    on its own and each description is non-empty."""
    docs: dict[str, TableDoc] = {}
    for name in column_docs.schema_files():
        read_docs(sqlfiles.load(name), name, docs)
    assert docs == schema_docs()
    assert [key for key, text in _written().items() if not text.strip()] == []


def _read(text: str, docs: dict[str, TableDoc] | None = None) -> dict[str, TableDoc]:
    docs = {} if docs is None else docs
    read_docs(text, "test.sql", docs)
    return docs


RUNS = """-- the runs
CREATE TABLE IF NOT EXISTS runs (
    -- run key
    run_id INTEGER,
    -- run name, over
    -- two lines
    name VARCHAR NOT NULL,  -- a note, not shown
    PRIMARY KEY (run_id)
);
"""


def test_the_convention_is_read():
    added = ("\n-- when\nALTER TABLE runs ADD COLUMN IF NOT EXISTS\n    at TIMESTAMP;\n"
             "-- by whom\nALTER TABLE runs ADD who VARCHAR;\n"
             "ALTER TABLE runs ADD PRIMARY KEY (run_id);\n")
    docs = _read(RUNS + added)
    assert docs == {"runs": TableDoc("the runs", {"run_id": "run key", "name": "run name, over two lines",
                                                  "at": "when", "who": "by whom"})}


@pytest.mark.parametrize(("text", "names"), [
    (RUNS.replace("    -- run key\n", ""), "column runs.run_id has no description"),
    (RUNS.replace("-- the runs\n", ""), "table runs has no description"),
    (RUNS.replace("    -- run key\n", "    -- run key\n\n"), "column runs.run_id has no description"),
    (RUNS + "-- run key again\nALTER TABLE runs ADD COLUMN IF NOT EXISTS run_id INTEGER;\n",
     "column runs.run_id is described twice"),
    (RUNS + "ALTER TABLE runs ADD COLUMN at TIMESTAMP;\n", "column runs.at has no description"),
    (RUNS + "COMMENT ON COLUMN runs.name IS 'x';\n", "COMMENT ON in a schema file"),
    (RUNS.replace("    PRIMARY KEY", "    -- the key\n    PRIMARY KEY"), "table runs: a description above a constraint"),
    ("-- t\nCREATE TABLE t (a INTEGER);\n", "CREATE TABLE name ( on a line of its own"),
    ("-- a\nALTER TABLE t ADD COLUMN a INTEGER;\n", "ALTER TABLE t before a schema file creates t"),
])
def test_a_break_of_the_convention_names_the_table_and_column(text, names):
    with pytest.raises(SchemaDocError, match="test.sql:[0-9]+: .*" + names.replace("(", r"\(").replace(".", r"\.")):
        _read(text)


def test_loaded_experiment_columns_do_not_count_as_undescribed(tmp_path):
    path = tmp_path / "t.duckdb"
    (tmp_path / "exp.csv").write_text("run,lr\na,0.1\n")
    con = connect(path)
    load_experiments(con, tmp_path / "exp.csv", "run")
    assert ("experiments", "lr") in _missing_comments(con)
    # the table and its key get their descriptions back from the schema files
    assert _shown(con)[("experiments", "")] == schema_docs()["experiments"].description
    assert _shown(con)[("experiments", "run")] == "run name (runs.name)"
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
    con.execute("COMMENT ON COLUMN runs.origin_ts IS 'an older text'")
    # such a database was made by an older ctda-sql: its schema fingerprint differs
    con.execute("UPDATE schema_version SET fingerprint = 'older'")
    assert undescribed_columns(con) == [("comm_model", ""), ("events", "name")]
    con.close()
    con = connect(path)
    try:
        assert undescribed_columns(con) == []
        # a description changed since is set too
        assert _shown(con)[("runs", "origin_ts")] == schema_docs()["runs"].columns["origin_ts"]
    finally:
        con.close()


def test_an_open_that_changes_nothing_writes_no_description(tmp_path):
    path = tmp_path / "t.duckdb"
    connect(path).close()
    before = path.read_bytes()
    connect(path).close()
    assert path.read_bytes() == before


def test_a_database_file_is_always_described_even_when_asked_for_a_scratch_one(tmp_path):
    """Only the lake tasks' in-memory warehouses skip the comments; a file never does, since
    its stored schema fingerprint would keep later opens from adding them."""
    with pytest.raises(ValueError):
        connect(tmp_path / "t.duckdb", scratch=True)
    assert not (tmp_path / "t.duckdb").exists()
    scratch = connect(":memory:", scratch=True)
    try:
        assert set(public_tables()) <= _tables(scratch)
        assert _missing_comments(scratch) != []
    finally:
        scratch.close()
