"""Every bundled .sql file parses (sqlglot, DuckDB dialect), and every bundled report runs.

Generic on purpose: reports and SQL files added later are covered without editing this file,
except for a report parameter that has no usable default (REQUIRED_PARAMS below).
"""

from __future__ import annotations

import re
from importlib import resources

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from ctda_sql.engine.reports import bundled_reports, run_report

from helpers.modules import package_sql_files
from helpers.traces import training_trace

# Parameters whose default (NULL) the report refuses; values name the small warehouse's runs.
REQUIRED_PARAMS = {"run_diff": {"run_a": "small", "run_b": "second"},
                   "path_diff": {"run_a": "small", "run_b": "second"}}
ANALYSIS_TABLES = {"nodes", "edges", "critical_path", "path_events", "analysis_windows"}
# sqlglot has no grammar for DuckDB macros: parse the macro's body instead of its header
_MACRO_HEADER = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?(?:MACRO|FUNCTION)\s+[\w.]+\s*"
    r"\((?:[^()]|\([^()]*\))*\)\s+AS\s+(?:TABLE\s+)?", re.I)
# nor for a column's storage codec, which changes no meaning
_COLUMN_CODEC = re.compile(r"\s+USING\s+COMPRESSION\s+\w+", re.I)
# DuckDB 2.0.1's extract_statements keeps the comments before each statement in its text
_LEADING_COMMENTS = re.compile(r"\A(?:\s*--[^\n]*(?:\n|\Z))*\s*")


def bundled_sql_files() -> list[str]:
    found = []
    for folder, package in (("sql", "ctda_sql.sql"), ("queries", "ctda_sql.queries")):
        found += [f"{folder}/{path}" for path in package_sql_files(package)]
    return sorted(found)


def _read(name: str) -> str:
    package, _, path = name.partition("/")
    return resources.files(package).joinpath(path).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", bundled_sql_files())
def test_sql_file_parses_statement_by_statement(name):
    statements = duckdb.extract_statements(_read(name))
    assert statements, f"{name} has no statement"
    for statement in statements:
        code = _LEADING_COMMENTS.sub("", statement.query, count=1)
        body = _COLUMN_CODEC.sub("", _MACRO_HEADER.sub("", code, count=1))
        try:
            sqlglot.parse_one(body, read="duckdb")
        except sqlglot.errors.ParseError as exc:
            pytest.fail(f"{name}: sqlglot cannot parse\n{body[:300]}\n{exc}")


def test_the_bundle_is_found():
    assert {"queries/runs.sql", "queries/hotspots_by_experiment.sql", "sql/schema.sql"} <= set(bundled_sql_files())


# ---- reports on a small warehouse -------------------------------------------------------

@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    """Runs `small` (two ranks) and `second`, analysed when the engine is importable."""
    from ctda_sql.core.connection import connect
    from ctda_sql.ingest.experiments import load_experiments, refresh_run_meta
    from ctda_sql.ingest.load import ingest

    folder = tmp_path_factory.mktemp("reports")
    con = connect(folder / "w.duckdb")
    for run, traces in (("small", [training_trace(0, 2), training_trace(1, 2, slow=50)]),
                        ("second", [training_trace(0, 1, slow=20)])):
        paths = [t.write(folder / f"{run}_{t.rank}.json") for t in traces]
        ingest(con, paths, run_name=run, meta={"batch": 8}, show_progress=False)
    refresh_run_meta(con)
    (folder / "exp.csv").write_text("name,cluster\nsmall,a\nsecond,b\n")
    load_experiments(con, folder / "exp.csv", "name")
    analysed = _analyse(con)
    yield con, analysed
    con.close()


def _analyse(con) -> bool:
    try:
        from ctda_sql.engine.analyze import analyze
    except ImportError:
        return False
    analyze(con, show_progress=False)
    return True


def _tables_read_by(sql: str) -> set[str]:
    tables = set()
    for statement in duckdb.extract_statements(sql):
        tree = sqlglot.parse_one(statement.query, read="duckdb")
        tables |= {table.name.lower() for table in tree.find_all(exp.Table)}
    return tables


@pytest.mark.parametrize("name", sorted(bundled_reports()))
def test_bundled_report_runs(warehouse, name):
    con, analysed = warehouse
    report = bundled_reports()[name]
    given = {key: str(value) for key, value in REQUIRED_PARAMS.get(name, {}).items()}
    rows = run_report(con, report, given).fetchall()
    if _tables_read_by(report.sql) & ANALYSIS_TABLES:
        if not analysed:
            pytest.skip("warehouse.analyze is not available: analysis tables stay empty")
        assert rows, f"report {name} returned no rows on an analysed warehouse"


def test_hotspots_by_experiment_joins_experiment_columns(warehouse):
    con, analysed = warehouse
    report = bundled_reports()["hotspots_by_experiment"]
    if not analysed:
        pytest.skip("warehouse.analyze is not available")
    for column, values in (("world_size", {"1", "2"}), ("cluster", {"a", "b"}), ("batch", {"8"})):
        rows = run_report(con, report, {"by": column}).fetchall()
        assert {row[1] for row in rows} == values
        shares = {}
        for row in rows:
            shares[row[1]] = shares.get(row[1], 0) + row[5]
        assert all(abs(total - 1) < 1e-9 for total in shares.values())


def test_hotspots_by_experiment_refuses_unknown_columns(warehouse):
    con, _ = warehouse
    report = bundled_reports()["hotspots_by_experiment"]
    from ctda_sql.core.errors import CtdaError

    # the project's own one line, without DuckDB's "Invalid Input Error: " prefix
    with pytest.raises(CtdaError, match="^unknown experiment column nosuch; known: batch, cluster, world_size$"):
        run_report(con, report, {"by": "nosuch"}).fetchall()


@pytest.mark.parametrize("name", [f"{folder}/{name}" for folder in ("analysis", "crossrank", "whatif", "advice",
                                                                    "advice/rules")
                                  for name in __import__("ctda_sql.core.sqlfiles").core.sqlfiles.names(folder)]
                         + ["ingest/threads.sql", "ingest/steps.sql"])  # the stages core.stages.run_stage runs
def test_stage_files_split_as_duckdb_splits_them(name):
    """parameterized_statements splits by text; it must agree with DuckDB's parser."""
    from ctda_sql.core import sqlfiles

    text = sqlfiles.load(name)
    ours = sqlfiles.parameterized_statements(text)
    reference = sqlfiles.duckdb_statements(text)
    assert [params for _, params in ours] == [params for _, params in reference]
    assert [_code(statement) for statement, _ in ours] == [_code(statement) for statement, _ in reference]


def _code(statement: str) -> str:
    without_comments = re.sub(r"--[^\n]*", "", statement)
    return " ".join(without_comments.split()).rstrip(";").strip()
