"""Multi-rank what-if: the ranks of a run are replayed together, a matched collective completes
at its last replayed arrival plus its transfer time, so removing one rank's stall predicts
every rank's step. Validated on the real gloo runs (tests/data/gloo): the straggler run with
rank 1's `slow_rank` sleep removed against the balanced run measured for real."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

import pytest

from ctda_sql.whatif.changes import parse_scale
from ctda_sql.whatif.replay import Scale, Scenario, whatif

from helpers.db import analysed_db
from helpers.jobs import GLOO, LATE_US, job

NO_STALL = Scenario(scales=(Scale("slow_rank", 0.0, "user_annotation", (1,)),))


@pytest.fixture(scope="module")
def gloo_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("multirank")
    con = analysed_db(root / "gloo.duckdb", {
        "balanced": [GLOO / "balanced"], "straggler": [GLOO / "straggler"],
        "late": [job(root / "late", world=4, steps=3, late={1: 1, 2: 1, 3: 1})],
        "lonely": [job(root / "lonely", world=2, steps=2, extra_on_rank0=True)],
    })
    yield con
    con.close()


def by_rank(rows) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for row in rows:
        out.setdefault(row[1], []).append(row)
    return out


@pytest.mark.parametrize("run", ["balanced", "straggler", "late", "lonely"])
def test_unchanged_coupled_replay_reproduces_every_rank(gloo_db, run):
    rows = whatif(gloo_db, run=run, persist=False).steps
    assert len({r[1] for r in rows}) >= 2
    assert [r for r in rows if abs(r[4] - r[3]) > 0.01 * r[3]] == []


def test_removing_the_late_ranks_work_predicts_every_rank(gloo_db):
    scenario = Scenario(scales=(Scale("aten::mm", 100 / (100 + LATE_US), None, (1,)),))
    coupled = whatif(gloo_db, run="late", scenario=scenario, persist=False).steps
    assert len(coupled) == 12
    for _, rank, step, measured, replay, predicted, *_ in coupled:
        assert predicted == pytest.approx(measured - LATE_US, abs=1.0), (rank, step)
    # replayed one by one, the other ranks keep their measured wait
    alone = whatif(gloo_db, run="late", scenario=scenario, persist=False, coupled=False).steps
    assert all(r[5] == pytest.approx(r[3]) for r in alone if r[1] != 1)


def test_rank_option_reports_one_rank_but_replays_them_all(gloo_db):
    scenario = Scenario(scales=(Scale("aten::mm", 100 / (100 + LATE_US), None, (1,)),))
    rows = whatif(gloo_db, run="late", rank=0, scenario=scenario, persist=False).steps
    assert {r[1] for r in rows} == {0}
    assert all(r[5] == pytest.approx(r[3] - LATE_US, abs=1.0) for r in rows)


def steady_median(rows, rank: int, column: int) -> float:
    return median(r[column] for r in rows if r[1] == rank)


def straggler_errors(con) -> list[dict]:
    """Per rank: the balanced run's measured median step, its spread (largest minus smallest
    steady step), and the straggler run's prediction with rank 1's sleep removed."""
    balanced = whatif(con, run="balanced", persist=False).steps
    predicted = whatif(con, run="straggler", scenario=NO_STALL, persist=False).steps
    alone = whatif(con, run="straggler", scenario=NO_STALL, persist=False, coupled=False).steps
    out = []
    for rank in (0, 1):
        truth = steady_median(balanced, rank, 3)
        steps = [r[3] for r in balanced if r[1] == rank]
        out.append({"rank": rank, "measured": steady_median(predicted, rank, 3), "truth": truth,
                    "noise": max(steps) - min(steps), "predicted": steady_median(predicted, rank, 5),
                    "per_rank": steady_median(alone, rank, 5)})
    for row in out:
        row["error"] = abs(row["predicted"] - row["truth"])
    return out


def test_removing_the_stragglers_sleep_predicts_the_balanced_run(gloo_db):
    for row in straggler_errors(gloo_db):
        assert row["error"] <= max(0.05 * row["truth"], row["noise"]), row
        # the coupling is what moves rank 0: replayed alone it keeps waiting for rank 1
        if row["rank"] == 0:
            assert row["per_rank"] == pytest.approx(row["measured"])
            assert row["predicted"] < 0.7 * row["measured"]


def test_rank_prefix_scopes_a_scale_to_ranks():
    assert parse_scale("rank1:user_annotation:slow_rank=0", {"user_annotation"}) == \
        Scale("slow_rank", 0.0, "user_annotation", (1,))
    assert parse_scale("rank2,0:aten::mm=0.5", set()) == Scale("aten::mm", 0.5, None, (0, 2))
    assert parse_scale("aten::mm=0.5", set()) == Scale("aten::mm", 0.5)


def test_cli_rank_scoped_change_is_stored(tmp_path, run_cli, open_db):
    assert run_cli("ingest", "-q", str(GLOO / "straggler"), "--run", "straggler").code == 0
    assert run_cli("analyze", "-q").code == 0
    result = run_cli("whatif", "--scale", "rank1:user_annotation:slow_rank=0", "--name", "no sleep",
                     "--rank", "0", "--format", "csv")
    assert result.code == 0, result.err
    con = open_db()
    rows = con.execute("SELECT rank, changes, measured_us, predicted_us FROM whatif_steps").fetchall()
    assert {r[0] for r in rows} == {0}
    assert json.loads(rows[0][1])["scale"][0]["ranks"] == [1]
    assert all(predicted < 0.7 * measured for _, _, measured, predicted in rows)


def test_unchanged_coupled_replay_on_two_ranks(shared_traces: Path, tmp_path):
    con = analysed_db(tmp_path / "two.duckdb", {"two_ranks": [shared_traces / "two_ranks"]})
    try:
        rows = whatif(con, persist=False).steps
        assert len(rows) == 4
        assert [r for r in rows if abs(r[4] - r[3]) > 0.01 * r[3]] == []
        assert con.execute("SELECT count(*) FROM wi_coupled_groups").fetchone()[0] >= 1
    finally:
        con.close()


# ---- the predicted path across ranks (issue 33, part 5) ----------------------------------

def stored_path(con, run: str, scenario: Scenario, name: str) -> list[tuple]:
    whatif(con, run=run, scenario=scenario, name=name)
    return con.execute(
        "SELECT p.rank, p.step, p.node_rank, p.node_step, p.node_id, p.label, p.measured_us, p.predicted_us, "
        "s.predicted_us FROM whatif_path AS p JOIN whatif_steps AS s USING (scenario, run_id, rank, step) "
        "WHERE p.scenario = ? ORDER BY p.rank, p.step, p.seq", [name]).fetchall()


def test_the_predicted_path_follows_a_wait_into_the_rank_that_held_it(gloo_db):
    rows = stored_path(gloo_db, "straggler", NO_STALL, "path no stall")
    # rank 1 still arrives last at the all-reduce: rank 0's path runs through rank 1's step
    for rank, step, node_rank, node_step, *_ in rows:
        assert node_step == step
    assert {r[2] for r in rows if r[0] == 0} == {0, 1}
    assert {r[2] for r in rows if r[0] == 1} == {1}
    # the path holds most of the predicted step (it stopped at the collective: 0.24-0.46 ms of 12-21 ms)
    on_path: dict[tuple, list[float]] = {}
    for rank, step, *_, predicted, step_us in rows:
        on_path.setdefault((rank, step), [0.0, step_us])[0] += predicted
    assert len(on_path) == 8
    assert [key for key, (total, step_us) in on_path.items() if not 0.4 * step_us <= total <= step_us] == []


def test_every_path_node_is_a_node_of_its_rank_and_step(gloo_db):
    stored_path(gloo_db, "straggler", NO_STALL, "path nodes")
    missing = gloo_db.execute(
        "SELECT p.* FROM whatif_path AS p ANTI JOIN nodes AS n "
        "ON n.method = 'ctda' AND n.run_id = p.run_id AND n.rank = p.node_rank AND n.step = p.node_step "
        "AND n.node_id = p.node_id AND n.label IS NOT DISTINCT FROM p.label WHERE p.scenario = 'path nodes'").fetchall()
    assert missing == []


def test_a_replay_without_coupling_keeps_each_path_on_its_rank(gloo_db):
    whatif(gloo_db, run="straggler", scenario=NO_STALL, name="alone", coupled=False)
    assert gloo_db.execute("SELECT count(*) FILTER (WHERE node_rank <> rank OR node_step <> step), count(*) "
                           "FROM whatif_path WHERE scenario = 'alone'").fetchone()[1] > 0
    assert gloo_db.execute("SELECT count(*) FROM whatif_path WHERE scenario = 'alone' "
                           "AND (node_rank <> rank OR node_step <> step)").fetchone()[0] == 0


def test_the_html_changes_show_only_nodes_that_changed(gloo_db):
    # removing rank 1's sleep (inside aten::randn) changes randn alone; NllLossBackward0 on the
    # measured path of rank 0 (it held the wait) showed -50 ms when the predicted path was cut
    from ctda_sql.core import sqlfiles

    stored_path(gloo_db, "straggler", NO_STALL, "html changes")
    run_id = gloo_db.execute("SELECT run_id FROM runs WHERE name = 'straggler'").fetchone()[0]
    changes = gloo_db.execute(sqlfiles.load("export/html_whatif_path.sql"), {"run_id": run_id, "top": 10}).fetchall()
    changed = {label: change for scenario, label, _, _, change in changes if scenario == "html changes"}
    assert list(changed) == ["aten::randn"] and changed["aten::randn"] < 0


def predicted_by_rank(con, run: str, scenario: Scenario) -> dict[int, float]:
    result = whatif(con, run=run, scenario=scenario, persist=False)
    return {row[1]: row[5] for row in result.steps}


RANK1_SLOWER = Scenario(scales=(Scale("aten::mm", 2.0, None, (1,)),))


def test_a_send_that_returned_before_its_receiver_arrived_is_not_held_for_it(p2p_db):
    """tests/engine/test_crossrank_parallel.py's send from rank 0, posted at 111 us, whose recv is
    posted at 601: buffered, it returns at 118. The sender ran on (its step: 945 us); the
    replay must not hold it until the receiver's arrival (it predicted 1428 us for the
    unchanged step, 2018 with rank 1 slower). Rank 1's aten::mm twice as long: its recv is
    posted at 1191, done at 1201, its last op takes 200 us: 1201 + 1 + 200 + 8 = 1410."""
    assert predicted_by_rank(p2p_db, "buffered", Scenario()) == {0: 945.0, 1: 720.0}
    assert predicted_by_rank(p2p_db, "buffered", RANK1_SLOWER) == {0: 945.0, 1: 1410.0}


def test_a_send_that_waited_for_its_receiver_waits_longer_for_a_slower_one(p2p_db):
    """The rendezvous send ends with the transfer: with the recv posted 590 us later (1191),
    rank 0's send ends at 1201 and the 827 us after it follow: 2028."""
    assert predicted_by_rank(p2p_db, "rendezvous", Scenario()) == {0: 1438.0, 1: 720.0}
    assert predicted_by_rank(p2p_db, "rendezvous", RANK1_SLOWER) == {0: 2028.0, 1: 1410.0}
