"""Across ranks with pipeline and sharded parallelism: point-to-point send/recv matched by
channel, a gloo call and its execution counted once, the cross-rank path through the stages.

A hand-made 2-stage 1F1B pipeline with 4 microbatches (answer derived by hand below), and
real 2-rank gloo runs recorded by scripts/record_gloo_parallel.py (tests/data/gloo): `fsdp`
(FSDP2 with prefetching), `pipeline` (2 stages, Schedule1F1B, 4 microbatches) and
`pipeline_slow` (the same, stage 1 sleeping in `slow_stage` in every microbatch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.db import analysed_db, report, rows
from helpers.jobs import staged_pipeline_job
from invariants import broken_invariants

GLOO = Path(__file__).parents[1] / "data" / "gloo"

# ---- a hand-made 2-stage pipeline ----------------------------------------------------------
#
# 1F1B on two stages, four microbatches, one step; every P2P call blocks its thread until it
# completes, as the schedule waits on each batch of sends/recvs. The call sequences are the
# ones torch.distributed.pipelining makes (issue 31):
#   rank 0 (stage 0): F0 S(a0) F1 [S(a1) R(g0)] B0 F2 [S(a2) R(g1)] B1 F3 [S(a3) R(g2)] B2 R(g3) B3
#   rank 1 (stage 1): R(a0) F0 B0 [S(g0) R(a1)] F1 B1 [S(g1) R(a2)] F2 B2 [S(g2) R(a3)] F3 B3 S(g3)
# so rank 0 calls S S R S R S R R and rank 1 R S R S R S R S: paired by call order, a send
# would face a send. Stage 0's forward and backward take 100 us, stage 1's 300 us (the
# bottleneck). A call lasts 2 us and arrives (posts) at its start; its gloo:send / gloo:recv
# runs on the same thread from the call's end to the completion, which is TRANSFER_US after
# the later of the two posts. The next op starts 1 us after the completion.
#
# Hand-derived timeline (us from the step start; both clocks agree):
#   rank 1 posts R(a0) at 5 and waits; rank 0 runs F0 10-110 and posts S(a0) at 111: a0
#   completes at 121 (rank 1 waited 106 for rank 0: the pipeline's fill bubble).
#   rank 1 then runs F0 122-422, B0 423-723, posts S(g0) at 724 and R(a1) at 727; rank 0,
#   which ran F1 122-222 and posted S(a1) 223 and R(g0) 226, waits until 737 for them.
#   From there rank 1 is busy without a break: F1 738-1038, B1 1039-1339, posts at 1340/1343,
#   completion 1353, F2 1354-1654, B2 1655-1955, posts 1956/1959, completion 1969, F3
#   1970-2270, B3 2271-2571, S(g3) posted at 2572, completes at 2582.
#   rank 0 posts every later send and recv before rank 1 (940/943, 1556/1559, 2071), so it
#   waits for rank 1 each time: 504, 498, 403, 397, 403, 397 and 501 us, 3103 us in all;
#   then B3 2583-2683 and the update 2684-2704; its step ends at 2710, rank 1's at 2610.
# The answer:
#   - all 16 sends/recvs are matched (8 per rank), on channels 0->1 (a0..a3) and 1->0 (g0..g3);
#   - waiting_on names rank 1 (the slow stage), which made the others wait 3103 us; rank 0
#     made rank 1 wait 106 us (a0);
#   - the cross-rank path starts on rank 0 (its step ends last), at g3 hops into rank 1 (which
#     rank 0 waited 501 us for), runs back through rank 1's eight 300 us ops, and at a0 (the
#     bubble, rank 1 waited 106 us for stage 0) hops back into rank 0's F0: hops 0, 1, 0, with
#     stage 1's 2400 us of compute and stage 0's F0 and B3 (200 us) on the path.
#   - the bubble is no idle time on the path: between 10 (F0's start) and 2704 (the update's
#     end) the path only has the 1 us steps between ops and the three 10 us transfers rank 1
#     waited for after posting last (each with its 2+2 us of calls); the rank-0 ctda path
#     instead has ~2.3 ms of waiting it cannot explain.

STAGE_US = {0: 100.0, 1: 300.0}


def pipeline_job(folder: Path) -> Path:
    """Write the two ranks' traces of the pipeline above."""
    return staged_pipeline_job(folder, STAGE_US, 0.0)


@pytest.fixture(scope="module")
def pipeline_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    con = analysed_db(root / "pipeline.duckdb", {"pipe": [pipeline_job(root / "pipe")]})
    yield con
    con.close()


def test_hand_made_pipeline_pairs_every_send_with_its_recv(pipeline_db):
    instances = rows(pipeline_db, "SELECT rank, pg, seq, name, matched, last_rank, wait_us "
                                  "FROM collective_instances ORDER BY pg, seq, rank")
    assert len(instances) == 16 and all(i["matched"] for i in instances)
    # per channel, in order: the sender's send with the receiver's recv
    for i in instances:
        sender = int(i["pg"].split(":")[1].split("->")[0])
        assert i["name"] == ("send" if i["rank"] == sender else "recv")
    last = {(i["pg"], i["seq"]): i["last_rank"] for i in instances}
    # a0 is the only transfer stage 0 posted last (the fill bubble); every other one waited for stage 1
    assert last == {("default:0->1", 1): 0, **{("default:0->1", s): 1 for s in (2, 3, 4)},
                    **{("default:1->0", s): 1 for s in (1, 2, 3, 4)}}
    assert report(pipeline_db, "unmatched_collectives") == []


def test_hand_made_pipeline_waits_on_the_slow_stage(pipeline_db):
    (row,) = report(pipeline_db, "waiting_on")
    assert row["waiting_on_rank"] == 1
    assert row["caused_wait_us"] == pytest.approx(504 + 498 + 403 + 397 + 403 + 397 + 501)
    assert row["total_wait_us"] == pytest.approx(3103 + 106)
    names = {r["name"] for r in report(pipeline_db, "collective_skew")}
    assert names == {"recv/send"}


def test_hand_made_pipeline_path_runs_through_both_stages(pipeline_db):
    hops = rows(pipeline_db, "SELECT hop, rank, from_us, to_us, gate_pg, gate_seq FROM cross_rank_segments ORDER BY hop")
    assert [(h["hop"], h["rank"], h["gate_pg"], h["gate_seq"]) for h in hops] == [
        (1, 0, "default:1->0", 4),   # rank 0 waited for g3 from rank 1
        (2, 1, "default:0->1", 1),   # rank 1 waited for a0 from rank 0 (the bubble)
        (3, 0, None, None)]
    base = hops[2]["from_us"]  # rank 0's window start; both clocks share the base
    assert [round(h["to_us"] - base) for h in hops] == [2710, 2572, 111]
    compute = rows(pipeline_db, "SELECT node_rank, sum(self_us) AS us FROM path_events "
                                "WHERE method = 'cross_rank' AND starts_with(name, 'aten::mm') GROUP BY node_rank "
                                "ORDER BY node_rank")
    assert [(c["node_rank"], c["us"]) for c in compute] == [(0, pytest.approx(200)), (1, pytest.approx(2400))]
    assert broken_invariants(pipeline_db) == {}


def test_hand_made_pipeline_bubble_is_a_wait_on_the_upstream_stage_not_idle(pipeline_db):
    def gaps(method):
        (row,) = rows(pipeline_db, "SELECT sum(gap_before_us) FILTER (WHERE seq > 1) AS gaps, sum(counted_us) AS path "
                                   "FROM critical_path WHERE method = ? AND rank = 0", [method])
        return row
    cross, own = gaps("cross_rank"), gaps("ctda")
    # between F0's start and the update's end (2694 us) the cross-rank path has no more than
    # the 1 us steps and the three transfers rank 1 waited for (3 x 14 us, calls included)
    assert cross["gaps"] <= 30 + 3 * 14
    assert cross["path"] >= 2694 - 30 - 3 * 14
    # rank 0's own path cannot explain its ~2.3 ms of waiting for stage 1
    assert own["path"] < 0.5 * cross["path"]


# ---- a send that returned before its receiver arrived is no gate -------------------------------
#
# One transfer from rank 0 to rank 1, in two versions. Rank 0 runs P (aten::mm 10-110), posts
# its send at 111 (the call 111-113, then its gloo:send), runs Q (aten::mm, 800 us) once the
# send returns and the update (aten::add_, 20 us); its step ends 5 us later. Rank 1 runs X
# (aten::mm 10-600), posts its recv at 601 (the call 601-603, then its gloo:recv until the
# transfer is done, TRANSFER_US after the later post: 611), runs Y (aten::mm 612-712); its step
# ends at 720. A side arrives at its post (the call executes it: no gloo worker thread): rank 0
# at 111, rank 1 at 601, last, in both versions (skew 490 us, last_rank 1; the recv waited 0).
#   buffered: the message is buffered, the send returns at 118, before rank 1 arrives: rank 0
#     waited for nothing (wait_us 0; waiting_on charges rank 1 nothing), Q runs 119-919, the
#     update 920-940, rank 0's step ends at 945, last.
#     The send is no gate: the path is rank 0's own, P and Q (900 us of aten::mm) on it, none
#     of rank 1. (Read as a gate, the path would cut rank 0 at 601 and put X in place of P, the
#     send and 482 us of Q.)
#   rendezvous: the send runs until the transfer is done at 611: rank 0 waited 601 - 111 = 490
#     us for rank 1 (waiting_on charges rank 1 490 us). Q runs 612-1412, the update 1413-1433,
#     the step ends at 1438, last. The send is a gate: the path runs on rank 0 back to rank 1's
#     arrival at 601 (Q and the update), crosses, and runs on rank 1 back to its window start
#     at 0 (X, 590 us).

def p2p_path(con, run: str) -> tuple[list[tuple], dict[int, float]]:
    """The run's cross_rank_segments (hop, rank, from and to relative to rank 0's window start,
    gate) and the aten::mm time on its cross-rank path per rank."""
    segments = rows(con, """
        SELECT s.hop, s.rank, s.from_us - w.start_us AS from_us, s.to_us - w.start_us AS to_us, s.gate_pg, s.gate_seq
        FROM cross_rank_segments s JOIN runs r USING (run_id)
        JOIN analysis_windows w ON w.run_id = s.run_id AND w.rank = 0 AND w.step = s.step
        WHERE r.name = ? ORDER BY s.hop""", [run])
    compute = rows(con, "SELECT e.node_rank, sum(e.self_us) AS us FROM path_events e JOIN runs r USING (run_id) "
                        "WHERE r.name = ? AND e.method = 'cross_rank' AND e.name = 'aten::mm' GROUP BY ALL", [run])
    return ([(s["hop"], s["rank"], round(s["from_us"], 3), round(s["to_us"], 3), s["gate_pg"], s["gate_seq"])
             for s in segments], {c["node_rank"]: c["us"] for c in compute})


def p2p_waits(con, run: str) -> tuple[dict[str, tuple], dict]:
    """The run's send and recv (matched, last_rank, skew_us, wait_us, time it ran) and its
    waiting_on row."""
    sides = rows(con, "SELECT i.name, i.matched, i.last_rank, i.skew_us, i.wait_us, i.end_us - i.start_us AS ran_us "
                      "FROM collective_instances i JOIN runs r USING (run_id) WHERE r.name = ?", [run])
    (waiting,) = report(con, "waiting_on", run=run)
    return ({s["name"]: (s["matched"], s["last_rank"], s["skew_us"], s["wait_us"], s["ran_us"]) for s in sides},
            {key: waiting[key] for key in ("waiting_on_rank", "caused_wait_us", "total_wait_us")})


def test_a_send_that_waited_for_its_receiver_is_where_the_path_crosses(p2p_db):
    sides, waiting = p2p_waits(p2p_db, "rendezvous")
    # the send waited from its post (111) to the receiver's (601)
    assert sides == {"send": (True, 1, 490, 490, 500), "recv": (True, 1, 490, 0, 10)}
    assert waiting == {"waiting_on_rank": 1, "caused_wait_us": 490, "total_wait_us": 490}
    segments, compute = p2p_path(p2p_db, "rendezvous")
    assert segments == [(1, 0, 601, 1438, "default:0->1", 1), (2, 1, 0, 601, None, None)]
    assert compute == {0: pytest.approx(800), 1: pytest.approx(590)}


def test_a_send_that_returned_before_its_receiver_arrived_is_no_gate(p2p_db):
    # matched, and rank 1 arrived 490 us after rank 0 (skew, last_rank), but the send had
    # returned 483 us before that (111-118): it waited for nothing, and no one is charged with it
    sides, waiting = p2p_waits(p2p_db, "buffered")
    assert sides == {"send": (True, 1, 490, 0, 7), "recv": (True, 1, 490, 0, 10)}
    assert waiting == {"waiting_on_rank": 1, "caused_wait_us": 0, "total_wait_us": 0}
    (skew,) = report(p2p_db, "collective_skew", run="buffered")
    assert (skew["last_rank"], skew["skew_us"], skew["wait_us_by_rank"], skew["total_wait_us"]) == (
        1, 490, {0: 0, 1: 0}, 0)
    segments, compute = p2p_path(p2p_db, "buffered")
    assert segments == [(1, 0, 0, 945, None, None)]
    assert compute == {0: pytest.approx(900)}
    # the path is rank 0's own, row for row
    paths = {method: rows(p2p_db, "SELECT c.node_rank, c.node_id, c.counted_start_us, c.counted_end_us, c.counted_us "
                                  "FROM critical_path c JOIN runs r USING (run_id) "
                                  "WHERE r.name = 'buffered' AND c.rank = 0 AND c.method = ? ORDER BY c.seq", [method])
             for method in ("ctda", "cross_rank")}
    assert paths["cross_rank"] == paths["ctda"]
    assert broken_invariants(p2p_db) == {}


# ---- recorded runs ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def parallel_db(tmp_path_factory):
    con = analysed_db(tmp_path_factory.mktemp("parallel") / "parallel.duckdb",
                      {name: [GLOO / name] for name in ("fsdp", "pipeline", "pipeline_slow")})
    yield con
    con.close()


def by_run(con, sql: str) -> dict[str, dict]:
    return {r["run"]: r for r in rows(con, sql)}


def test_recorded_pipelines_match_every_send_and_recv(parallel_db):
    # 3 profiled steps x 4 microbatches: per rank 12 sends and 12 recvs. Paired by call order,
    # 2 of 48 and 0 of 48 matched
    counts = by_run(parallel_db, "SELECT r.name AS run, count(*) AS n, count(*) FILTER (WHERE matched) AS matched, "
                                 "count(DISTINCT pg) AS channels FROM collective_instances JOIN runs AS r USING (run_id) "
                                 "WHERE r.name LIKE 'pipeline%' GROUP BY r.name")
    for run in ("pipeline", "pipeline_slow"):
        assert (counts[run]["n"], counts[run]["matched"], counts[run]["channels"]) == (48, 48, 2)


def test_recorded_fsdp_counts_each_call_once(parallel_db):
    # per rank and step 7 all-gathers and 4 reduce-scatters (21 and 12 over the 3 steps), each
    # also seen as its gloo:all_gather / gloo:all_reduce execution on a worker thread
    calls = rows(parallel_db, "SELECT c.rank, count(*) AS n FROM events AS c JOIN runs AS r USING (run_id) "
                              "WHERE r.name = 'fsdp' AND c.name IN ('c10d::_allgather_base_', 'c10d::_reduce_scatter_base_') "
                              "GROUP BY c.rank ORDER BY c.rank")
    instances = rows(parallel_db, "SELECT i.rank, count(*) AS n, count(*) FILTER (WHERE matched) AS matched, "
                                  "count(*) FILTER (WHERE executed_on = 'gloo_worker' AND cpu_event_id IS NOT NULL) AS paired "
                                  "FROM collective_instances AS i JOIN runs AS r USING (run_id) WHERE r.name = 'fsdp' "
                                  "GROUP BY i.rank ORDER BY i.rank")
    assert [c["n"] for c in calls] == [33, 33]
    assert [(i["n"], i["matched"], i["paired"]) for i in instances] == [(33, 33, 33), (33, 33, 33)]
    # no all-reduce the program never made
    names = {r["name"] for r in report(parallel_db, "collective_skew", run="fsdp")}
    assert names == {"allgather_base", "reduce_scatter_base"}


def test_recorded_slow_stage_is_waited_on_and_on_the_path(parallel_db):
    waiting = report(parallel_db, "waiting_on", run="pipeline_slow")
    assert len(waiting) == 3 and all(r["waiting_on_rank"] == 1 for r in waiting)
    hot = report(parallel_db, "cross_rank_hotspots", run="pipeline_slow", top=50)
    slow = [r for r in hot if r["name"] == "slow_stage"]
    assert slow and all(r["rank"] == 1 for r in slow)
    # four 5 ms sleeps per step: 20 ms on the path in each of the 3 steps, at least
    assert sum(r["path_us"] for r in slow) >= 3 * 4 * 5000 * 0.95


def test_recorded_pipeline_paths_cross_ranks_through_send_recv(parallel_db):
    crossing = rows(parallel_db, "SELECT r.name AS run, count(*) AS hops FROM cross_rank_segments AS s "
                                 "JOIN runs AS r USING (run_id) WHERE s.gate_pg LIKE '%->%' GROUP BY r.name")
    assert {c["run"] for c in crossing} >= {"pipeline", "pipeline_slow"}
    ranks = rows(parallel_db, "SELECT r.name AS run, count(DISTINCT node_rank) AS ranks FROM critical_path "
                              "JOIN runs AS r USING (run_id) WHERE method = 'cross_rank' GROUP BY r.name ORDER BY r.name")
    assert all(r["ranks"] == 2 for r in ranks)


def test_recorded_parallel_runs_keep_every_path_invariant(parallel_db):
    assert broken_invariants(parallel_db) == {}
