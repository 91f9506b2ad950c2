"""`from warehouse import Warehouse`: the Python API notebooks use (and the CLI calls)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from test_engine_figures import figure1_trace
from warehouse import Warehouse
from warehouse.errors import CtdaError


@pytest.fixture
def warehouse(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest(figure1_trace().write(tmp_path / "fig.json"), run="fig", meta={"batch_size": 64})
        wh.analyze(run="fig")
        yield wh


def test_reports_come_back_as_relations_with_bound_parameters(warehouse):
    cpcr = warehouse.report("cpcr", run="fig", method="ctda")
    assert isinstance(cpcr, duckdb.DuckDBPyRelation)
    table = cpcr.arrow().read_all() if hasattr(cpcr.arrow(), "read_all") else cpcr.arrow()
    assert isinstance(table, pa.Table) and table.num_rows == 1
    assert set(cpcr.fetchnumpy()["method"]) == {"ctda"}
    # text from the command line and Python values bind the same way
    assert warehouse.report("hotspots", top=2).fetchall() == warehouse.report("hotspots", top="2").fetchall()


def test_report_parameters_are_checked(warehouse):
    with pytest.raises(CtdaError, match="has no parameter 'nope'"):
        warehouse.report("cpcr", nope=1)
    with pytest.raises(CtdaError, match="no report named"):
        warehouse.report("no_such_report")


def test_sql_binds_parameters_and_returns_a_relation(warehouse):
    rel = warehouse.sql("SELECT count(*) AS n FROM runs WHERE name = $run", {"run": "fig"})
    assert rel.columns == ["n"] and rel.fetchall() == [(1,)]
    assert warehouse.sql("SELECT meta ->> 'batch_size' FROM runs").fetchall() == [("64",)]
    with pytest.raises(CtdaError, match="no SQL"):
        warehouse.sql("  ")


def test_analyze_settings_reach_the_engine(warehouse):
    summary = warehouse.analyze(run="fig", method="ctda", wait_gap_us=9.0)
    assert "ctda: mean CPCR" in summary and "per_thread" not in summary
    with pytest.raises(CtdaError, match="wait_gap_us"):
        warehouse.analyze(wait_gap_us=-1)


def test_reports_lists_the_saved_reports(warehouse):
    names = [row[0] for row in warehouse.reports().fetchall()]
    assert {"hotspots", "cpcr", "runs"} <= set(names)


def test_close_releases_the_database_for_a_writer(tmp_path):
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as wh:
        wh.ingest(figure1_trace().write(tmp_path / "fig.json"), run="fig")
    with Warehouse(path, read_only=True) as reader:
        assert reader.sql("SELECT name FROM runs").fetchall() == [("fig",)]
        with pytest.raises(duckdb.Error):
            reader.sql("DELETE FROM runs")


def test_a_borrowed_connection_stays_open(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as owner:
        Warehouse.on_connection(owner.con).close()
        assert owner.con.execute("SELECT 1").fetchall() == [(1,)]


def test_whatif_predicts_from_the_api_and_persists_the_scenario(tmp_path):
    from warehouse.tracebuilder import TraceBuilder

    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 1_000)
    b.cpu_op(main, "aten::slow_preprocess", 0, 600)
    b.cpu_op(main, "aten::mm", 600, 400)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest(b.write(tmp_path / "t.json"), run="r")
        wh.analyze(run="r")
        relation = wh.whatif(run="r", scale={"aten::slow_preprocess": 0}, name="no preprocess")
        [row] = [dict(zip(relation.columns, values)) for values in relation.fetchall()]
        assert row["scenario"] == "no preprocess"
        measured, predicted = row["measured_us"], row["predicted_us"]
        assert measured == pytest.approx(1_000) and predicted == pytest.approx(400, abs=1)
