"""`from ctda_sql import Warehouse`: the Python API notebooks use (and the CLI calls)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from ctda_sql import Warehouse
from ctda_sql.core.errors import CtdaError

from helpers.traces import figure1_trace


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
    from ctda_sql.testing.tracebuilder import TraceBuilder

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


@pytest.mark.parametrize("call, message", [
    (lambda wh: wh.ingest(None), "paths must be a path or a list of paths, got None"),
    (lambda wh: wh.ingest([]), "paths is empty"),  # was an IndexError
    (lambda wh: wh.ingest("x.json", run=5), "run must be text, got 5"),
    (lambda wh: wh.ingest("x.json", meta=[1, 2]), "meta must be a dict"),
    (lambda wh: wh.ingest("x.json", meta={1: 2}), "meta keys must be text, got 1"),  # was an AttributeError
    (lambda wh: wh.analyze(run=5), "run must be text, got 5"),  # was DuckDB's ConversionException
    (lambda wh: wh.analyze(method=5), "method must be text, got 5"),  # was a TypeError
    (lambda wh: wh.analyze(wait_gap_us="x"), "wait_gap_us must be a number, got 'x'"),
    (lambda wh: wh.analyze(wait_gap_us=float("nan")), "wait_gap_us must be a finite number, 0 or more, got nan"),
    (lambda wh: wh.report(5), "name must be text, got 5"),
    (lambda wh: wh.report("hotspots", top=[1]), "parameter top must be a whole number (INTEGER), got [1]"),
    (lambda wh: wh.report("hotspots", top=1.5), "parameter top must be a whole number (INTEGER), got 1.5"),
    (lambda wh: wh.sql(5), "text must be SQL text, got 5"),
    (lambda wh: wh.sql("SELECT ?", 5), "params must be a dict (for $name) or a list (for ?), got 5"),
    (lambda wh: wh.sql("SELECT $x"), "params do not match the SQL's parameters"),
    (lambda wh: wh.sql("SELECT 1", [1]), "params do not match the SQL's parameters: Binder Error"),
    (lambda wh: wh.whatif(scale=[1]), "scale must be a dict"),
    (lambda wh: wh.whatif(rank="a"), "rank must be a whole number, got 'a'"),
    (lambda wh: wh.whatif(comm_bandwidth_scale="a"), "comm_bandwidth_scale must be a number, got 'a'"),
    (lambda wh: wh.whatif(world_size="a"), "world_size must be a whole number, got 'a'"),
    (lambda wh: wh.export_overlay("o.json", run=5), "run must be text, got 5"),
    (lambda wh: wh.export_overlay("o.json", run="fig", rank="a"), "rank must be a whole number, got 'a'"),
    (lambda wh: wh.export_overlay("o.json", run="fig", methods=5), "methods must be a method name"),
    (lambda wh: wh.export_html(None, run="fig"), "path must be a path (str or Path), got None"),
    (lambda wh: wh.load_experiments("x.csv", key=5), "key must be text, got 5"),
])
def test_bad_arguments_are_one_ctda_error_naming_them(warehouse, call, message):
    """Issue 35 (Low): the API raised raw TypeError, IndexError, AttributeError and DuckDB's
    Conversion/Binder errors for arguments of the wrong kind."""
    with pytest.raises(CtdaError) as caught:
        call(warehouse)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_wrong_kind_of_database_argument_is_a_ctda_error():
    with pytest.raises(CtdaError, match="db must be a path"):
        Warehouse(5)


def test_reports_dirs_may_be_one_folder(warehouse, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "one.sql").write_text("-- name: one\n-- description: one row\nSELECT 1 AS one;\n")
    assert warehouse.report("one", reports_dirs=str(folder)).fetchall() == [(1,)]  # was read letter by letter


def test_a_closed_warehouse_says_so_instead_of_reopening(tmp_path):
    """Issue 35 (Low): after close() the next call opened the database again, silently (and
    held its lock)."""
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.ingest(figure1_trace().write(tmp_path / "fig.json"), run="fig")
    wh.close()
    for use in (lambda: wh.sql("SELECT 1"), lambda: wh.con, lambda: wh.report("runs"),
                lambda: wh.ingest(tmp_path / "fig.json"), lambda: wh.__enter__()):
        with pytest.raises(CtdaError, match=r"Warehouse\(.*\) is closed; open a new Warehouse"):
            use()
    wh.close()  # twice is fine
    with Warehouse(tmp_path / "w.duckdb") as writer:  # the closed one holds no lock
        assert writer.sql("SELECT name FROM runs").fetchall() == [("fig",)]
