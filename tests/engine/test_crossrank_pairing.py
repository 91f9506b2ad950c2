"""Send/recv pairing across ranks (issue 43, High 5 and the cross-rank Lows): a send pairs
with the recv of the same step on its channel, in order within the step, only when the recv
completed after the send was posted and both carry the same message size. Before, sends and
recvs paired in order over the whole trace: a trace that began a step later, or one lost
recv, shifted every later pair, and the wrong pairs were stored as matched.

The hand-made job: rank 0 sends MESSAGES activations a step to rank 1. In every step (1000
us) rank 1 posts its recv of message m at 50 + 200 m and waits; rank 0 posts its send at 100 +
200 m; the transfer completes 10 us later (110 + 200 m), before rank 0 posts the next send. So
every true pair has rank 1 arriving 50 us early: skew 50 us, last_rank 0."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest

from ctda_sql.core.connection import connect
from ctda_sql.engine.analyze import analyze
from ctda_sql.ingest.load import ingest
from ctda_sql.testing.tracebuilder import TraceBuilder
from ctda_sql.whatif.replay import whatif

from helpers.db import analysed_db, report, rows
from helpers.jobs import job, p2p_call

MESSAGES = 3
STEPS = 4
SKEW_US = 50.0
TRANSFER_US = 10.0


def p2p_job(folder: Path, *, first_step: dict[int, int] | None = None, lost: set[tuple] = frozenset(),
            doubled: set[tuple] = frozenset(), rows_by: dict[tuple, int] | None = None,
            moved: dict[tuple, float] | None = None, nccl: bool = False) -> Path:
    """The two ranks' traces. first_step[r]: rank r's trace begins at that step (its profiler
    started later); lost: (rank, step, m) calls missing from the trace; doubled: (rank, step, m)
    calls written twice; rows_by[(rank, step, m)]: that call's tensor has this many rows of 256
    (8 otherwise); moved[(rank, step, m)]: that call is posted and completes this much later;
    nccl: the calls launch ncclDevKernel_SendRecv kernels (executed there)
    instead of running gloo:send / gloo:recv on the calling thread."""
    folder.mkdir(parents=True, exist_ok=True)
    first_step, rows_by, moved = first_step or {}, rows_by or {}, moved or {}
    for rank in (0, 1):
        # a pid of the job's own: ingest skips a file it holds (a rank's file can be the same in two jobs)
        b = TraceBuilder(rank=rank, world_size=2, pid=4000 + 2 * (zlib.crc32(folder.name.encode()) % 1000) + rank)
        lane = b.thread(400 + rank, "pt_main_thread")
        for step in range(first_step.get(rank, 1), STEPS + 1):
            t0 = (step - 1) * 1000.0
            b.step(step, lane, ts=t0, dur=990)
            for m in range(MESSAGES):
                key = (rank, step, m)
                if key in lost:
                    continue
                recv_ts, send_ts = t0 + 50 + 200 * m, t0 + 100 + 200 * m
                done = send_ts + TRANSFER_US
                ts = (send_ts if rank == 0 else recv_ts) + moved.get(key, 0)
                done += moved.get(key, 0)
                for _ in range(2 if key in doubled else 1):
                    call = nccl_call if nccl else p2p_call_sized
                    call(b, lane, "send" if rank == 0 else "recv", 1 - rank, ts, done, rows_by.get(key, 8))
            b.cpu_op(lane, "aten::add_", ts=t0 + 900, dur=20)
        b.write(folder / f"rank-{rank}.json.gz")
    return folder


def p2p_call_sized(b: TraceBuilder, lane, kind: str, peer: int, ts: float, done: float, n_rows: int) -> None:
    """A gloo send or recv of an n_rows x 256 float tensor (test_crossrank_parallel's call)."""
    p2p_call(b, lane, kind, peer, ts, done)
    call, execution = b.events[-2], b.events[-1]
    call["args"]["Input Dims"] = [[[n_rows, 256]], [], [], []]
    execution["args"]["Input Dims"] = [[n_rows, 256]]


def nccl_call(b: TraceBuilder, lane, kind: str, peer: int, ts: float, done: float, n_rows: int) -> None:
    """A blocking NCCL send or recv: the c10d call with its record_param_comms, whose launch
    starts an ncclDevKernel_SendRecv on the NCCL stream at the post (+3 us) until `done`."""
    b.cpu_op(lane, "c10d::send" if kind == "send" else "c10d::recv_", ts=ts, dur=6, **{
        "Input Dims": [[[n_rows, 256]], [], [], []], "Input type": ["TensorList", "", "Scalar", "Scalar"],
        "Concrete Inputs": ["", "", str(peer), "0"]})
    b.cpu_op(lane, "record_param_comms", ts=ts + 1, dur=4, **{
        "Collective name": kind, "In msg nelems": n_rows * 256, "Out msg nelems": n_rows * 256, "dtype": "Float",
        "Process Group Name": "0", "Process Group Ranks": "[0, 1]", "Group size": 2})
    b.launch(lane, ts=ts + 2, dur=2, kernel="ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
             stream=16, kernel_ts=ts + 3, kernel_dur=done - ts - 3)


def p2p_rows(con, run: str) -> list[dict]:
    return rows(con, """
        SELECT i.rank, i.step, i.pg, i.seq, i.name, i.nelems, i.matched, i.unmatched_reason, i.last_rank, i.skew_us,
               coalesce(i.enqueue_us, i.start_us) - w.start_us AS posted_us
        FROM collective_instances i JOIN runs r USING (run_id)
        JOIN steps w ON w.run_id = i.run_id AND w.rank = i.rank AND w.step = i.step
        WHERE r.name = ? ORDER BY i.step, i.rank, i.start_us""", [run])


def pairs(instances: list[dict]) -> dict[tuple, list[dict]]:
    """Matched instances by (pg, seq)."""
    found: dict[tuple, list[dict]] = {}
    for i in instances:
        if i["matched"]:
            found.setdefault((i["pg"], i["seq"]), []).append(i)
    return found


def assert_true_pairs(instances: list[dict]) -> int:
    """Every matched pair is a send and the recv of its step and message: the same step, the
    recv posted 50 us before the send, skew 50, last rank 0. Returns the number of pairs."""
    matched = pairs(instances)
    for (pg, seq), sides in matched.items():
        by_name = {s["name"]: s for s in sides}
        assert sorted(by_name) == ["recv", "send"], (pg, seq, sides)
        send, recv = by_name["send"], by_name["recv"]
        assert send["step"] == recv["step"], (pg, seq, sides)
        assert send["posted_us"] - recv["posted_us"] == pytest.approx(SKEW_US), (pg, seq, sides)
        assert (send["skew_us"], send["last_rank"]) == (pytest.approx(SKEW_US), 0), (pg, seq, sides)
    return len(matched)


def unmatched(instances: list[dict]) -> list[tuple]:
    return [(i["rank"], i["step"], i["name"], round(i["posted_us"]), i["unmatched_reason"])
            for i in instances if not i["matched"]]


@pytest.fixture(scope="module")
def pairing_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairing")
    jobs = {
        "whole": p2p_job(root / "whole"),
        "late_start": p2p_job(root / "late_start", first_step={1: 2}),
        "late_start_nccl": p2p_job(root / "late_start_nccl", first_step={1: 2}, nccl=True),
        "lost_recv": p2p_job(root / "lost_recv", lost={(1, 2, 0)}),
        "lost_send": p2p_job(root / "lost_send", lost={(0, 3, 1)}),
        "doubled": p2p_job(root / "doubled", doubled={(1, 2, 1), (0, 3, 0)}),
        "sizes": p2p_job(root / "sizes", rows_by={(0, 2, 1): 16}),
    }
    con = analysed_db(root / "pairing.duckdb", {name: [folder] for name, folder in jobs.items()})
    yield con
    con.close()


def test_a_whole_trace_pairs_every_send_with_the_recv_of_its_message(pairing_db):
    instances = p2p_rows(pairing_db, "whole")
    assert assert_true_pairs(instances) == STEPS * MESSAGES
    assert unmatched(instances) == []


@pytest.mark.parametrize("run", ["late_start", "late_start_nccl"])
def test_a_rank_whose_trace_starts_a_step_later_pairs_only_within_steps(pairing_db, run):
    # rank 1's trace begins at step 2: rank 0's step-1 sends have no recv. Paired in order,
    # they took rank 1's step-2 recvs, and every later send the next step's recvs, all
    # "matched" with skews of about a step
    instances = p2p_rows(pairing_db, run)
    assert assert_true_pairs(instances) == (STEPS - 1) * MESSAGES
    assert unmatched(instances) == [(0, 1, "send", 100 + 200 * m, "no partner on rank 1 in step 1")
                                    for m in range(MESSAGES)]


def test_a_late_start_leaves_the_cross_rank_reports_with_true_pairs_only(pairing_db):
    skew = report(pairing_db, "collective_skew", run="late_start")
    assert len(skew) == (STEPS - 1) * MESSAGES
    assert {(r["step"], r["last_rank"], r["skew_us"]) for r in skew} == {
        (step, 0, SKEW_US) for step in range(2, STEPS + 1)}
    listed = report(pairing_db, "unmatched_collectives", run="late_start")
    assert [(r["rank"], r["step"], r["reason"]) for r in listed] == [(0, 1, "no partner on rank 1 in step 1")] * 3


def test_the_coupled_whatif_couples_only_the_true_pairs(pairing_db):
    # the replay couples matched send/recv pairs: before, rank 1's step-2 recvs waited there
    # for rank 0's step-1 sends
    whatif(pairing_db, run="late_start", persist=False)
    groups = rows(pairing_db, """
        SELECT g.pg, g.seq, count(DISTINCT i.step) AS steps, list(i.step) AS step
        FROM wi_coupled_groups g JOIN collective_instances i USING (run_id, pg, seq)
        JOIN runs r USING (run_id) WHERE r.name = 'late_start' GROUP BY ALL""")
    assert len(groups) == (STEPS - 1) * MESSAGES
    assert all(g["steps"] == 1 for g in groups), groups


def test_a_lost_recv_leaves_its_send_unmatched_and_no_other_pair_shifts(pairing_db):
    # rank 1's recv of step 2's first message is missing. In order, step 2's first send took
    # the second message's recv, and every later pair shifted by one to the end of the trace
    instances = p2p_rows(pairing_db, "lost_recv")
    assert assert_true_pairs(instances) == STEPS * MESSAGES - 1
    assert unmatched(instances) == [(0, 2, "send", 100, "no partner on rank 1 in step 2")]


def test_a_lost_send_leaves_its_recv_unmatched_and_no_other_pair_shifts(pairing_db):
    instances = p2p_rows(pairing_db, "lost_send")
    assert assert_true_pairs(instances) == STEPS * MESSAGES - 1
    assert unmatched(instances) == [(1, 3, "recv", 250, "no partner on rank 0 in step 3")]


def test_a_call_written_twice_is_one_call(pairing_db):
    # a recv and a send whose events the trace holds twice (same times, same thread)
    instances = p2p_rows(pairing_db, "doubled")
    assert assert_true_pairs(instances) == STEPS * MESSAGES
    assert unmatched(instances) == []


def test_a_send_and_a_recv_of_different_sizes_do_not_match(pairing_db):
    # rank 0 sends 16 x 256 where rank 1 receives 8 x 256: before, sizes of send/recv were
    # not compared, and the pair was matched
    instances = p2p_rows(pairing_db, "sizes")
    assert assert_true_pairs(instances) == STEPS * MESSAGES - 1
    assert unmatched(instances) == [(0, 2, "send", 300, "message size differs across ranks"),
                                    (1, 2, "recv", 250, "message size differs across ranks")]


def test_a_recv_that_completed_before_its_send_was_posted_is_no_pair(tmp_path):
    # rank 1's recv of step 2's first message is posted at 5 and completes at 65, 35 us before
    # rank 0 posts its send at 100: they are not one message, and the pair is refused
    folder = p2p_job(tmp_path / "stray", moved={(1, 2, 0): -45})
    con = analysed_db(tmp_path / "stray.duckdb", {"stray": [folder]})
    try:
        instances = p2p_rows(con, "stray")
    finally:
        con.close()
    assert assert_true_pairs(instances) == STEPS * MESSAGES - 1
    reason = "a rank finished it before another arrived: not the same collective"
    assert unmatched(instances) == [(0, 2, "send", 100, reason), (1, 2, "recv", 5, reason)]


# ---- the cross-rank Lows ---------------------------------------------------------------------

def rewrite_steps(path: Path, change, **top) -> None:
    """Give each ProfilerStep event of a written trace the (ts, name) change(event) returns,
    and the trace the top-level keys `top`."""
    trace = json.loads(gzip.decompress(path.read_bytes())) | top
    for event in trace["traceEvents"]:
        if event.get("name", "").startswith("ProfilerStep#"):
            event["ts"], event["name"] = change(event)
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))


def test_tied_step_ends_give_the_same_path_every_time(tmp_path):
    # eight ranks whose every step ends at the same instant: the path starts on the lowest of
    # them; and in step 3, where no rank is late, all arrive at the all-reduce at one instant:
    # the lowest is its last_rank. Before, the rank was any of the tied ones, and one of 5
    # analyses of one trace gave different critical_path rows
    folder = job(tmp_path / "tied", world=8, steps=4, late={1: 2, 2: 3, 4: 6})
    # job() starts (and ends) rank 0's steps 5 us after the others': align them; and one host,
    # so one clock (the ends' jitter would give each rank an offset of a few us)
    for rank in range(8):
        rewrite_steps(folder / f"rank-{rank}.json.gz",
                      lambda step: (step["ts"] - (5 if rank == 0 else 0), step["name"]), host_name="node")
    # (the highest rank ingested first: a pick by storage order would take it)
    con = analysed_db(tmp_path / "tied.duckdb", {"tied": sorted(folder.iterdir(), reverse=True)})
    try:
        results = []
        for _ in range(5):
            analyze(con, show_progress=False)
            ends = con.execute("SELECT count(DISTINCT w.e2e_end_us - coalesce(t.clock_offset_us, 0)) "
                               "FROM analysis_windows w JOIN traces t USING (run_id, rank) GROUP BY step").fetchall()
            assert ends == [(1,)] * 4  # the ties are real, in aligned time
            results.append(rows(con, "SELECT rank, step, seq, node_rank, node_id, counted_start_us, counted_end_us, "
                                     "counted_us FROM critical_path WHERE method = 'cross_rank' ORDER BY step, seq"))
            first = rows(con, "SELECT step, rank FROM cross_rank_segments WHERE hop = 1 ORDER BY step")
            assert [(r["step"], r["rank"]) for r in first] == [(step, 0) for step in (1, 2, 3, 4)]
            last = rows(con, "SELECT step, list(DISTINCT last_rank) AS last, max(skew_us) AS skew "
                             "FROM collective_instances GROUP BY step ORDER BY step")
            assert [(r["step"], r["last"]) for r in last] == [(1, [2]), (2, [3]), (3, [0]), (4, [6])]
            assert last[2]["skew"] == 0
    finally:
        con.close()
    assert all(r == results[0] for r in results)


def test_ranks_with_different_step_numbers_get_a_note(tmp_path):
    # rank 1 numbers its steps from 11: every all-reduce matches, but no step is on both
    # ranks, so the path cannot cross and cross_rank equals ctda. Before, nothing said so
    folder = job(tmp_path / "numbers", world=2, steps=3, late={1: 1, 2: 1, 3: 1})
    rewrite_steps(folder / "rank-1.json.gz",
                  lambda step: (step["ts"], f"ProfilerStep#{10 + int(step['name'].split('#')[1])}"))
    con = connect(tmp_path / "numbers.duckdb")
    try:
        ingest(con, [folder], run_name="numbers", show_progress=False)
        summary = analyze(con, show_progress=False)
        matched = con.execute("SELECT count(*) FILTER (WHERE matched), count(*) FROM collective_instances").fetchone()
    finally:
        con.close()
    assert matched == (6, 6)
    assert ("note: run 'numbers': 3 matched collectives fall in different steps on their ranks "
            "(steps: rank 0 1-3, rank 1 11-13); the cross-rank path does not cross at them") in summary


def test_ranks_with_the_same_step_numbers_get_no_note(pairing_db):
    summary = analyze(pairing_db, run="whole", show_progress=False)
    assert "note:" not in summary
