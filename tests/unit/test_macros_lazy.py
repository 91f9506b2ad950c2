"""One-shot queries and reports make only the macros and views their SQL needs."""

from __future__ import annotations

import duckdb
import pytest

from ctda_sql.core import sqlfiles
from ctda_sql.core.connection import _MACRO_START, connect, macro_statements
from ctda_sql.engine.reports import bundled_reports, report_sql_run


@pytest.mark.parametrize("name", sqlfiles.names("macros"))
def test_every_macro_statement_is_found(name):
    text = sqlfiles.load(f"macros/{name}")
    assert len(_MACRO_START.findall(text)) == len(duckdb.extract_statements(text))


def test_the_closure_brings_what_a_macro_uses():
    made = macro_statements("SELECT * FROM analysis_temporal_breakdown('r', NULL, false)")
    assert "TEMP MACRO analysis_busy_per_rank(" in made
    assert "TEMP VIEW analysis_gpu_ops AS" in made
    assert "is_blocking_copy" not in made
    assert macro_statements("SELECT 1") == ""


def test_all_macros_together_equal_the_folder():
    everything = " ".join(name for name in _names_of_all())
    assert len(_MACRO_START.findall(macro_statements(everything))) == len(_names_of_all())


def _names_of_all() -> list[str]:
    return [m for name in sqlfiles.names("macros") for m in _MACRO_START.findall(sqlfiles.load(f"macros/{name}"))]


@pytest.mark.parametrize("report", sorted(bundled_reports().values(), key=lambda r: r.name),
                         ids=lambda r: r.name)
def test_every_report_binds_with_only_its_macros(report):
    con = connect(":memory:", for_sql=report.sql, macros_for=report_sql_run(report))
    try:
        try:
            con.execute(report.sql, report.bind({})).fetchall()
        except duckdb.InvalidInputException:  # the report's own check of an empty database
            pass  # (a missing macro would be a CatalogException)
        con.execute(sqlfiles.load("reports/run_status.sql")).fetchall()
    finally:
        con.close()
