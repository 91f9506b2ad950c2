"""`ingest --analyze`: from trace files to critical paths in one command (one process, one
open of the warehouse), with the same results as `ingest` then `analyze`, and the load kept
when the analysis fails."""

from __future__ import annotations

import duckdb
import pytest

from ctda_sql.core.errors import CtdaError

RESULT_TABLES = ("nodes", "edges", "critical_path", "path_events", "collective_instances", "cross_rank_segments")


def rows(db_path, table: str) -> list[tuple]:
    with duckdb.connect(str(db_path), read_only=True) as con:
        return con.execute(f"SELECT * EXCLUDE (run_id) FROM {table} ORDER BY ALL").fetchall()


def test_ingest_analyze_gives_what_ingest_then_analyze_gives(run_cli, tmp_path, shared_traces):
    job = shared_traces / "two_ranks"
    one, two = tmp_path / "one.duckdb", tmp_path / "two.duckdb"
    together = run_cli("ingest", "-q", "--analyze", str(job), db=one)
    assert together.code == 0, together.err
    assert "run 'two_ranks': 2 loaded" in together.out and "analyzed 4 windows of 2 rank(s)" in together.out
    assert run_cli("ingest", "-q", str(job), db=two).code == 0
    assert run_cli("analyze", "-q", db=two).code == 0
    for table in RESULT_TABLES:
        assert rows(one, table) == rows(two, table), table


def test_only_the_loaded_run_is_analysed(run_cli, tmp_path, shared_traces):
    db = tmp_path / "runs.duckdb"
    assert run_cli("ingest", "-q", str(shared_traces / "simple_add.json.gz"), db=db).code == 0
    result = run_cli("ingest", "-q", "--analyze", str(shared_traces / "nccl.json.gz"), db=db)
    assert result.code == 0, result.err
    with duckdb.connect(str(db), read_only=True) as con:
        analysed = con.execute("SELECT DISTINCT r.name FROM analysis_windows JOIN runs r USING (run_id)").fetchall()
    assert analysed == [("nccl",)]


def test_nothing_new_loaded_is_not_analysed_again(run_cli, tmp_path, shared_traces):
    trace = str(shared_traces / "simple_add.json.gz")
    assert run_cli("ingest", "-q", "--analyze", trace).code == 0
    again = run_cli("ingest", "-q", "--analyze", trace)
    assert again.code == 0
    assert "nothing new was loaded: run 'simple_add' not analysed" in again.out


def test_a_failed_analysis_keeps_the_new_database_and_its_load(run_cli, db_path, shared_traces, monkeypatch):
    def broken(self, *args, **kwargs):
        raise CtdaError("the analysis broke")

    monkeypatch.setattr("ctda_sql.api.Warehouse.analyze", broken)
    result = run_cli("ingest", "-q", "--analyze", str(shared_traces / "simple_add.json.gz"))
    assert result.code != 0 and "the analysis broke" in result.err
    assert db_path.exists()
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("SELECT name FROM runs").fetchall() == [("simple_add",)]
        assert con.execute("SELECT count(*) FROM analysis_windows").fetchone()[0] == 0


def test_the_shell_ingest_takes_analyze_too(tmp_path, shared_traces, capsys):
    from ctda_sql.shell.app import open_state, run_and_show

    state = open_state(str(tmp_path / "shell.duckdb"))
    try:
        assert run_and_show(state, f".ingest {shared_traces / 'simple_add.json.gz'} --analyze --method ctda")
        out = capsys.readouterr().out
        assert "analyzed 1 windows of 1 rank(s)" in out
        assert run_and_show(state, f".ingest {shared_traces / 'simple_add.json.gz'} --analyze")
        assert "nothing new was loaded: run 'simple_add' not analysed" in capsys.readouterr().out
    finally:
        state.set_output(None)
        state.con.close()


def test_analyze_options_reach_the_analysis(run_cli, db_path, shared_traces):
    result = run_cli("ingest", "-q", "--analyze", "--method", "ctda", "--wait-gap-us", "30",
                     str(shared_traces / "simple_add.json.gz"))
    assert result.code == 0, result.err
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("SELECT DISTINCT method FROM critical_path").fetchall() == [("ctda",)]


@pytest.mark.parametrize("options, named", [
    (["--method", "ctda"], "--method"), (["--no-split-starved", "--window", "Step"], "--window, --no-split-starved"),
])
def test_analyze_options_without_analyze_are_refused_before_loading(run_cli, db_path, shared_traces, options, named):
    result = run_cli("ingest", "-q", *options, str(shared_traces / "simple_add.json.gz"))
    assert result.code != 0 and result.err == f"error: {named} only apply with --analyze\n"
    assert not db_path.exists()


def test_a_bad_analyze_option_is_refused_before_loading(run_cli, db_path, shared_traces):
    result = run_cli("ingest", "-q", "--analyze", "--wait-gap-us", "-1", str(shared_traces / "simple_add.json.gz"))
    assert result.err == "error: --wait-gap-us must be a finite number, 0 or more, got -1\n"
    assert not db_path.exists()
