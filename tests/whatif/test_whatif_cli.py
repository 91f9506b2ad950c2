"""`ctda-sql whatif` on hostile or odd input: every bad value is one `error:` line naming what
exists, a sweep is one transaction with a cap, --format json is one document, a step without
nodes replays, and a one-rank world predicts no slower step (issues 33 and 35)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctda_sql.cli.whatif import MAX_SWEEP_VALUES
from ctda_sql.core.connection import connect
from ctda_sql.whatif import replay as whatif_module
from ctda_sql.whatif.changes import parse_scale
from ctda_sql.whatif.replay import Scenario, whatif

from helpers.db import analysed_db
from helpers.jobs import GLOO


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
    assert set(document) == {"steps", "totals", "path"}
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
    assert result.out.splitlines()[1] == "empty,0,1,1000.0,1000.0,1000.0,1.0,0.0,1000.0,0.0,1000.0"


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


# ---- a step that starts sooner waits longer (issue 43, first use 4) ------------------------

def sooner_job(folder: Path) -> Path:
    """Two ranks, two steps of 500 us each, every step's all-reduce at 120 us into it (a 50 us
    transfer), then aten::add_ and the optimizer's work (optimizer_work, 290 us) and 10 us of
    idle tail; rank 1's step 1 alone runs optimizer_work after the all-reduce: removed, that
    step ends at 210 us and rank 1's step 2 starts there, but its all-reduce still waits for
    rank 0, which arrives at 620 us as measured. Derived by hand:
      rank 1, step 1: 0..500 -> 0..210 (the 290 us removed), speedup 500 / 210;
      rank 1, step 2: 500..1000 -> 210..1000: arrives at 330 us, waits to 670 as rank 0's
        step 2 did, then add_ (5 us after, 20 us) and the measured 305 us of tail: 790 us,
        speedup 500 / 790, ending where it did;
      rank 0 is unchanged; each rank's steps together: 1000 us before and after."""
    from ctda_sql.testing.tracebuilder import TraceBuilder

    from helpers.jobs import collective

    folder.mkdir()
    for rank in (0, 1):
        builder = TraceBuilder(rank=rank, world_size=2, pid=1000 + rank)
        main, worker = builder.thread(100 + rank, "pt_main_thread"), builder.thread(500 + rank, "gloo worker")
        for step in (1, 2):
            t0 = (step - 1) * 500.0
            builder.step(step, main, ts=t0, dur=500)
            builder.cpu_op(main, "aten::mm", ts=t0 + 10, dur=100)
            collective(builder, main, worker, t0 + 120, t0 + 122, t0 + 170, [0, 1])
            builder.cpu_op(main, "aten::add_", ts=t0 + 175, dur=20)
            if step == 1:
                builder.cpu_op(main, "optimizer_work", ts=t0 + 200, dur=290)
        builder.write(folder / f"rank-{rank}.json")
    return folder


SOONER = "rank1:cpu_op:optimizer_work=0"
# (rank, step): replay_us, predicted_us, speedup, replay_start_us, replay_end_us,
# predicted_start_us, predicted_end_us; derived in sooner_job's docstring
SOONER_STEPS = {
    (0, 1): (500.0, 500.0, 1.0, 0.0, 500.0, 0.0, 500.0),
    (0, 2): (500.0, 500.0, 1.0, 500.0, 1000.0, 500.0, 1000.0),
    (1, 1): (500.0, 210.0, round(500 / 210, 4), 0.0, 500.0, 0.0, 210.0),
    (1, 2): (500.0, 790.0, round(500 / 790, 4), 500.0, 1000.0, 210.0, 1000.0),
}


@pytest.fixture(scope="module")
def sooner_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sooner") / "sooner.duckdb"
    analysed_db(path, {"sooner": [sooner_job(path.parent / "sooner")]}).close()
    return path


def test_a_step_that_starts_sooner_shows_its_start_and_end(sooner_db):
    """The Python API: each step's start and end in both replays, from the replay's origin,
    and per rank the steps together, which a change that only moves the wait leaves alone."""
    from ctda_sql.whatif.replay import STEP_COLUMNS, TOTAL_COLUMNS

    con = connect(sooner_db)
    try:
        result = whatif(con, run="sooner", scenario=Scenario(scales=(parse_scale(SOONER, {"cpu_op"}),)),
                        name="sooner")
        stored = con.execute("SELECT rank, step, replay_us, predicted_us, speedup, replay_start_us, replay_end_us, "
                             "predicted_start_us, predicted_end_us FROM whatif_steps WHERE scenario = 'sooner'"
                             ).fetchall()
    finally:
        con.close()
    shown = STEP_COLUMNS.index("replay_us")
    steps = {(row[1], row[2]): row[shown:] for row in result.steps}
    assert steps.keys() == SOONER_STEPS.keys()
    for key, expected in SOONER_STEPS.items():
        assert steps[key] == pytest.approx(expected, abs=1e-3), key
    assert {(row[0], row[1]) for row in stored} == SOONER_STEPS.keys()
    for rank, step, *values in stored:  # whatif_steps holds the same
        assert values == pytest.approx(SOONER_STEPS[(rank, step)], abs=1e-3), (rank, step)
    assert TOTAL_COLUMNS == ["run", "rank", "steps", "measured_us", "replay_us", "predicted_us", "speedup"]
    assert result.totals == [("sooner", 0, 2, 1000.0, 1000.0, 1000.0, 1.0),
                             ("sooner", 1, 2, 1000.0, 1000.0, 1000.0, 1.0)]


def test_the_whatif_table_shows_where_each_step_runs_and_each_ranks_total(sooner_db, run_cli):
    """The CLI at 80 columns: the slower step's start and end beside its speedup, and the
    rank's total line; csv and json carry every column."""
    result = run_cli("whatif", "--run", "sooner", "--scale", SOONER, "--max-width", "80", db=sooner_db)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = next(line for line in lines if "speedup" in line)
    assert [cell.strip() for cell in header.strip("│").split("│")] == [
        "rank", "step", "replay_us", "predicted_us", "speedup", "start_us", "end_us"]
    slower = next(line for line in lines if line.startswith("│    1 │    2 │"))
    assert [cell.strip() for cell in slower.strip("│").split("│")] == [
        "1", "2", "500.0 µs", "790.0 µs", "0.6329", "210.0 µs", "1.00 ms"]
    totals = lines[lines.index("per rank, its steps together: what the changes buy the rank") + 4:][:2]
    assert [[cell.strip() for cell in line.strip("│").split("│")] for line in totals] == [
        ["sooner", "0", "2", "1.00 ms", "1.00 ms", "1.00 ms", "1"],
        ["sooner", "1", "2", "1.00 ms", "1.00 ms", "1.00 ms", "1"]]
    document = json.loads(run_cli("whatif", "--run", "sooner", "--scale", SOONER, "--format", "json",
                                  db=sooner_db).out)
    row = next(r for r in document["steps"] if (r["rank"], r["step"]) == (1, 2))
    assert (row["replay_start_us"], row["replay_end_us"], row["predicted_start_us"], row["predicted_end_us"]) == \
        pytest.approx((500.0, 1000.0, 210.0, 1000.0), abs=1e-3)
    assert [(r["rank"], r["steps"], r["speedup"]) for r in document["totals"]] == [(0, 2, 1.0), (1, 2, 1.0)]


def test_the_html_names_scenarios_by_their_arguments(sooner_db, run_cli, tmp_path):
    """The page calls a scenario by the whatif arguments that replay it (with --rank when it
    reported one rank of several), not by its changes as raw JSON; a --name stays."""
    halved = "rank1:cpu_op:optimizer_work=0.5"  # a scenario of its own in the module's database
    assert run_cli("whatif", "--run", "sooner", "--scale", halved, "--rank", "1", "--format", "csv",
                   db=sooner_db).code == 0
    assert run_cli("whatif", "--run", "sooner", "--scale", "aten::mm=0.5", "--comm-bandwidth-scale", "2",
                   "--name", "half mm", "--format", "csv", db=sooner_db).code == 0
    page = tmp_path / "sooner.html"
    result = run_cli("export", "html", "--run", "sooner", "-o", str(page), db=sooner_db)
    assert result.code == 0, result.err
    text = page.read_text(encoding="utf-8")
    assert f'"--scale {halved} --rank 1"' in text
    assert '"half mm"' in text and "--scale aten::mm=0.5 --comm-bandwidth-scale 2" in text
    assert '\\"scale\\"' not in text and "comm_bandwidth_scale" not in text


@pytest.mark.parametrize("changes, arguments", [
    (Scenario(), "unchanged"),
    (Scenario(scales=(parse_scale("rank1:cpu_op:aten::_foreach_mul_=0", {"cpu_op"}),)),
     "--scale rank1:cpu_op:aten::_foreach_mul_=0"),
    (Scenario(scales=(parse_scale("kernel:*gemm*=0.25", {"kernel"}),), latency_us=12.5, allreduce="tree",
              world_size=64, drop_syncs=True),
     "--scale 'kernel:*gemm*=0.25' --comm-latency-us 12.5 --allreduce tree --world-size 64 --drop-syncs"),
])
def test_scenario_arguments_replay_the_scenario(changes, arguments):
    from ctda_sql.export.html import scenario_arguments

    assert scenario_arguments(changes.as_json()) == arguments
