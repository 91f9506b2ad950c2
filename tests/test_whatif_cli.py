"""`ctda-sql whatif` on hostile or odd input: every bad value is one `error:` line naming what
exists, a sweep is one transaction with a cap, --format json is one document, a step without
nodes replays, and a one-rank world predicts no slower step (issues 33 and 35)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.db import analysed_db
from helpers.jobs import GLOO
from ctda_sql.whatif import replay as whatif_module
from ctda_sql.cli.whatif import MAX_SWEEP_VALUES
from ctda_sql.core.connection import connect
from ctda_sql.whatif.replay import Scenario, whatif


@pytest.fixture(scope="module")
def straggler_db(tmp_path_factory) -> Path:
    """The 2-rank gloo straggler run (ranks 0 and 1, steps 2-5), analysed."""
    path = tmp_path_factory.mktemp("whatif_cli") / "straggler.duckdb"
    analysed_db(path, {"straggler": [GLOO / "straggler"]}).close()
    return path


def stored_scenarios(path: Path) -> set[str]:
    con = connect(path, read_only=True)
    try:
        return {row[0] for row in con.execute("SELECT DISTINCT scenario FROM whatif_steps").fetchall()}
    finally:
        con.close()


def one_error_line(result) -> str:
    assert result.code != 0 and result.err.count("\n") == 1 and result.err.startswith("error:"), result
    return result.err


@pytest.mark.parametrize("args, message", [
    # non-finite or absurd values are refused at once (NaN passes every `< 0` test)
    (["--scale", "aten::mm=nan"], "--scale factor must be a number from 0 to"),
    (["--scale", "aten::mm=inf"], "--scale factor must be a number from 0 to"),
    (["--scale", "aten::mm=1e308"], "--scale factor must be a number from 0 to"),
    (["--comm-bandwidth-scale", "nan"], "--comm-bandwidth-scale must be a number from"),
    (["--comm-bandwidth-scale", "inf"], "--comm-bandwidth-scale must be a number from"),
    (["--comm-bandwidth-scale", "1e308"], "--comm-bandwidth-scale must be a number from"),
    (["--comm-latency-us", "nan"], "--comm-latency-us must be a number from 0 to"),
    (["--comm-latency-us=-inf"], "--comm-latency-us must be a number from 0 to"),
    (["--comm-latency-us", "1e308"], "--comm-latency-us must be a number from 0 to"),
    (["--scale", "aten::mm=nan", "--no-coupling"], "--scale factor must be a number"),
    # what does not exist is named with what does
    (["--rank", "99"], "no analysed rank 99; ranks: 0, 1"),
    (["--step", "99"], "no analysed step 99; steps: 2-5"),
    (["--rank", "1", "--step", "1"], "no analysed step 1 of rank 1; steps: 2-5"),
    (["--scale", "rank99:*=0.5"], "--scale names rank 99, which the replayed run(s) do not have; ranks: 0, 1"),
    (["--scale", "rank0,7:aten::mm=0.5"], "names rank 7"),
    (["--top", "-1"], "--top must be 0 or more"),
    (["--sweep", "world-size=,,,"], "every value between the commas must be given"),
    (["--sweep", "world-size=1,,2"], "every value between the commas must be given"),
    (["--sweep", "world-size=2,x"], "values must be whole numbers"),
    (["--sweep", "comm-latency-us=1,nan"], "--comm-latency-us must be a number"),
    (["--sweep", "comm-bandwidth-scale=" + ",".join(["1"] * (MAX_SWEEP_VALUES + 1))],
     f"at most {MAX_SWEEP_VALUES} in one sweep"),
])
def test_bad_values_are_one_error_line_and_store_nothing(straggler_db, run_cli, args, message):
    before = stored_scenarios(straggler_db)
    result = run_cli("whatif", "--run", "straggler", *args, "--format", "csv", db=straggler_db)
    assert message in one_error_line(result)
    assert result.out == ""
    assert stored_scenarios(straggler_db) == before


def test_a_sweep_that_fails_part_way_stores_nothing(straggler_db, run_cli, monkeypatch):
    real_replay, calls = whatif_module._replay, []

    def failing_third_replay(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the unchanged replay, the first value, then the second value
            raise whatif_module.CtdaError("disk full")
        return real_replay(*args, **kwargs)

    monkeypatch.setattr(whatif_module, "_replay", failing_third_replay)
    result = run_cli("whatif", "--run", "straggler", "--sweep", "comm-bandwidth-scale=2,4,8",
                     "--name", "partial", db=straggler_db)
    assert "disk full" in one_error_line(result)
    assert not any(name.startswith("partial") for name in stored_scenarios(straggler_db))


def test_a_sweep_is_stored_whole(straggler_db, run_cli):
    result = run_cli("whatif", "--run", "straggler", "--sweep", "world-size=1,2", "--name", "whole",
                     "--format", "csv", db=straggler_db)
    assert result.code == 0, result.err
    assert [line.split(",")[0] for line in result.out.splitlines()[1:]] == ["1", "2"]
    assert {"whole world-size=1", "whole world-size=2"} <= stored_scenarios(straggler_db)


def test_a_sweep_shows_progress_on_a_terminal(straggler_db, run_cli, monkeypatch):
    shown = []

    class Bar:
        def __init__(self, label, total, visible=True):
            shown.append([label, total, visible, 0])

        def __enter__(self):
            return lambda: shown[-1].__setitem__(3, shown[-1][3] + 1)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr("ctda_sql.core.progress.progress_bar", Bar)
    result = run_cli("whatif", "--run", "straggler", "--sweep", "comm-bandwidth-scale=1,2,4", db=straggler_db)
    assert result.code == 0, result.err
    assert shown == [["whatif --sweep comm-bandwidth-scale", 3, True, 3]]


def test_json_is_one_document(straggler_db, run_cli):
    result = run_cli("whatif", "--run", "straggler", "--format", "json", "--top", "3", db=straggler_db)
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert set(document) == {"steps", "path"}
    assert len(document["steps"]) == 8 and {"rank", "step", "predicted_us"} <= set(document["steps"][0])
    assert len(document["path"]) == 3 and {"kind", "label", "predicted_us"} <= set(document["path"][0])
    sweep = json.loads(run_cli("whatif", "--run", "straggler", "--sweep", "world-size=1,2", "--format", "json",
                               db=straggler_db).out)
    assert [row["value"] for row in sweep["sweep"]] == [1, 2]


def test_the_path_table_has_a_title(straggler_db, run_cli):
    out = run_cli("whatif", "--run", "straggler", "--top", "3", "--max-width", "0", db=straggler_db).out
    assert "predicted critical path: the top 3 labels by predicted time (8 steps of 2 rank(s))" in out


# ---- the same two defects without the real-trace tier ------------------------------------

def test_a_world_of_one_rank_moves_no_bytes_on_the_gloo_run(straggler_db):
    """Issue 35 #6: the bus factor was 1.0 at n <= 1 where 2(n-1)/n is 0. Since issue 42 the
    gloo transfers follow the network flags and take no time here: no rank's steps add up to
    more (coupled, a rank that reaches a collective sooner may wait there longer in a step)."""
    con = connect(straggler_db)
    try:
        for coupled in (True, False):
            rows = whatif(con, scenario=Scenario(world_size=1), persist=False, coupled=coupled).steps
            assert len(rows) == 8
            for rank in (0, 1):
                assert sum(r[5] for r in rows if r[1] == rank) <= sum(r[4] for r in rows if r[1] == rank) + 1e-6
        assert con.execute("SELECT wi_bus_factor('allreduce', 1, 'ring'), "  # made by the replay above
                           "wi_latency_steps('allreduce', 1, 'ring')").fetchone() == (0.0, 0.0)
    finally:
        con.close()


def test_a_run_whose_only_step_has_no_nodes_replays_as_measured(tmp_path, run_cli):
    """Issue 35 #22: a step the engine drew no node for was an IndexError in _lengths."""
    from ctda_sql.testing.tracebuilder import TraceBuilder

    builder = TraceBuilder(rank=0, world_size=1)
    builder.step(1, builder.thread(100, "pt_main_thread"), 0, 1_000)
    assert run_cli("ingest", "-q", str(builder.write(tmp_path / "empty.json"))).code == 0
    assert run_cli("analyze", "-q").code == 0
    result = run_cli("whatif", "--scale", "*=0.5", "--format", "csv")
    assert result.code == 0, result.err
    assert result.out.splitlines()[1] == "empty,0,1,1000.0,1000.0,1000.0,1.0"


# ---- the real shared traces --------------------------------------------------------------

def test_a_world_of_one_rank_communicates_nothing(shared_traces, tmp_path):
    # docs/whatif.md: an all-reduce moves 2(n-1)/n bus bytes per byte, none at n = 1
    con = analysed_db(tmp_path / "two.duckdb", {"two_ranks": [shared_traces / "two_ranks"]})
    try:
        for coupled in (True, False):
            rows = whatif(con, scenario=Scenario(world_size=1), persist=False, coupled=coupled).steps
            slower = [(r[1], r[2], r[4], r[5]) for r in rows if r[5] > r[4] + 1e-6]
            assert len(rows) == 4 and slower == []
        # a world of one rank moves no bytes: the fit learns nothing from it
        assert con.execute("SELECT wi_bus_factor('allreduce', 1, 'ring'), "
                           "wi_latency_steps('allreduce', 1, 'ring')").fetchone() == (0.0, 0.0)
    finally:
        con.close()


def test_a_step_without_nodes_replays_as_measured(shared_traces, tmp_path, run_cli):
    # cpu_only.json.gz has one step and nothing the engine draws a node for
    assert run_cli("ingest", "-q", str(shared_traces / "cpu_only.json.gz"), "--run", "cpu").code == 0
    assert run_cli("analyze", "-q").code == 0
    result = run_cli("whatif", "--scale", "*=0.5", "--format", "csv")
    assert result.code == 0, result.err
    header, row = result.out.splitlines()[:2]
    measured, replay, predicted = (float(v) for v in row.split(",")[3:6])
    assert header.startswith("run,rank,step,measured_us") and measured == replay == predicted
