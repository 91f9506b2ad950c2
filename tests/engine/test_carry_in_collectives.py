"""Carry-in collectives (issue 42 item 4): NCCL kernels still in flight when a step window
starts are nodes of their own, and the rest of a stream's carry-in splits where it waited on
another stream, as a window's own GPU nodes do. Merged into one node per stream, the carry-in
hid the receive that waited for the peer's late send, and the compute that waited on it.

The hand-made job (times in us, both ranks on one clock; streams: 7 compute, 20 NCCL):

    rank 0 (receives)                              rank 1 (sends)
    step 1 [0, 1000): posts recv A (790), recv B   step 1 [0, 1000): posts send A (790), the
      (820) and K1, K2, which consume A and B        compute KS (800), send B (820), which
      (inferred stream waits)                        sends what KS makes
    GPU: A 800-1040, K1 1042-1100,                 GPU: send A 800-1040, KS 810-1498,
         B 1045-1600 (waits for send B until 1500),     send B 1500-1600
         K2 1602-1700
    step 2 [1000, ..): cudaDeviceSynchronize       step 2 [1000, ..): cudaDeviceSynchronize
      1010-1702, add_ 1705-1715, K3 1720-1760        1010-1602, add_ 1605-1615, K4 1620-1650

Every kernel but K3 and K4 runs in step 2 as carry-in. A and send A start together (neither
waits); recv B waits 455 us for rank 1's send B, which waited on KS: the gate.

Rank 0's step 2 by hand. The sync's wait-return node waits on the last node to end on each
stream: K2 (1700) and B (1600); K2, the later. K2 waited on B (stream wait, 1600 against K1's
1100 on its stream), B followed A on its stream. So the ctda path is A, B, K2, the wait return,
add_ (to its launch's end, 1710), K3, counting from the window start: A 1000-1040 (40), B
1045-1600 (555), K2 1602-1700 (98), add_ 1705-1710 (5), K3 1720-1760 (40) = 738 us of the
760 us window (1000-1760). With one node per stream, A+B (800-1600) and K1+K2 (1042-1700),
the path went A+B -> K1+K2 and counted only what runs in those nodes' windows (A 40, K1 58,
K2 98): 241 us; B's 500 us after K1 were idle, and the receive that waited was no node.

The cross-rank path of step 2 starts on rank 0 (its step ends last: 1760 against 1650), goes
back to the gate B, and leaves rank 0 at rank 1's arrival (1500): rank 0's rows from 1500 (B's
last 100 us, K2, add_, K3: 243 us). On rank 1 it follows rank 1's own step-2 path (KS, send
B, ... by the same reasoning) back from 1500 to the window start: KS 1000-1498, 498 us. The
path counts 741 us of 760, and no time rank 0 spent waiting.

The coupled what-if with rank 1's KS twice as fast: KS 810-1154, send B 1156-1256 (2 us after
KS, as measured), so recv B's transfer runs 1156-1256 too (its wait shrinks by 344 us) and
rank 0's step 2 goes K2 1258-1356, the sync's return 1358, add_ 1361, K3 1376-1416: 416 us (760
measured). Rank 1's: the sync returns at 1258, add_ 1261, K4 1276-1306: 306 us (650). The
carried-in nodes of step 2 move with their stream's replayed end, as the kernels' own nodes in
step 1 replay them; timed again along their edges in step 2, KS's shorter run counted twice
and rank 1's step came out at 184 us.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctda_sql.testing.tracebuilder import TraceBuilder
from ctda_sql.whatif.changes import Scale, Scenario
from ctda_sql.whatif.replay import whatif

from helpers.db import analysed_db, rows
from invariants import broken_invariants, create_cpcr_rows

PARALLEL = Path(__file__).parents[1] / "data" / "cuda" / "parallel"
NCCL = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
STEP2_WINDOW_US = 760.0


def p2p(builder: TraceBuilder, lane, kind: str, peer: int, ts: float, kernel_ts: float, kernel_dur: float) -> None:
    """A c10d send / recv_ to / from `peer` at `ts` (8 us) launching its NCCL kernel on stream 20."""
    builder.cpu_op(lane, "c10d::send" if kind == "send" else "c10d::recv_", ts=ts, dur=8, **{
        "Input Dims": [[[8, 256]], [], [], []], "Input type": ["TensorList", "", "Scalar", "Scalar"],
        "Concrete Inputs": ["", "", str(peer), "0"]})
    builder.launch(lane, ts + 2, 3, NCCL, stream=20, kernel_ts=kernel_ts, kernel_dur=kernel_dur,
                   call="cuLaunchKernelEx")


def compute(builder: TraceBuilder, lane, name: str, ts: float, kernel: str, kernel_ts: float,
            kernel_dur: float) -> None:
    """A 10 us op at `ts` launching `kernel` on stream 7."""
    builder.cpu_op(lane, name, ts=ts, dur=10)
    builder.launch(lane, ts + 2, 3, kernel, stream=7, kernel_ts=kernel_ts, kernel_dur=kernel_dur)


def carry_in_job(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    receiver = TraceBuilder(rank=0, world_size=2, pid=1000)
    main = receiver.thread(100, "pt_main_thread")
    receiver.step(1, main, 0, 990)
    p2p(receiver, main, "recv", 1, 790, kernel_ts=800, kernel_dur=240)          # A
    compute(receiver, main, "aten::mm", 800, "k1_consumes_a", 1042, 58)         # K1
    p2p(receiver, main, "recv", 1, 820, kernel_ts=1045, kernel_dur=555)         # B
    compute(receiver, main, "aten::mm", 830, "k2_consumes_b", 1602, 98)         # K2
    receiver.step(2, main, 1000, 760)
    receiver.runtime(main, "cudaDeviceSynchronize", 1010, 692)
    compute(receiver, main, "aten::add_", 1705, "k3", 1720, 40)
    receiver.write(folder / "rank-0.json.gz")

    sender = TraceBuilder(rank=1, world_size=2, pid=1001)
    main = sender.thread(101, "pt_main_thread")
    sender.step(1, main, 0, 990)
    p2p(sender, main, "send", 0, 790, kernel_ts=800, kernel_dur=240)            # send A
    compute(sender, main, "aten::mm", 800, "ks_makes_b", 810, 688)              # KS
    p2p(sender, main, "send", 0, 820, kernel_ts=1500, kernel_dur=100)           # send B
    sender.step(2, main, 1000, 650)
    sender.runtime(main, "cudaDeviceSynchronize", 1010, 592)
    compute(sender, main, "aten::add_", 1605, "k4", 1620, 30)
    sender.write(folder / "rank-1.json.gz")
    return folder


@pytest.fixture(scope="module")
def carry_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("carry_in")
    con = analysed_db(root / "carry.duckdb", {"carry": [carry_in_job(root / "carry")]})
    create_cpcr_rows(con)
    yield con
    con.close()


def path_rows(con, method: str, rank: int, step: int) -> list[tuple]:
    """(node rank, first event of the node, counted start, counted end, counted us) along the path."""
    return [tuple(r.values()) for r in rows(con, """
        SELECT c.node_rank, n.label, round(c.counted_start_us, 3) AS counted_start_us,
               round(c.counted_end_us, 3) AS counted_end_us, round(c.counted_us, 3) AS counted_us
        FROM critical_path c
        JOIN nodes n ON n.run_id = c.run_id AND n.rank = c.node_rank AND n.step = c.step AND n.method = 'ctda'
             AND n.node_id = c.node_id
        WHERE c.method = ? AND c.rank = ? AND c.step = ? ORDER BY c.seq""", [method, rank, step])]


def test_the_gate_is_a_collective_of_the_job(carry_db):
    """Recv B is the only side that waited: 455 us, for rank 1's send B arriving at 1500."""
    waited = rows(carry_db, "SELECT rank, name, start_us, end_us, last_rank, wait_us FROM collective_instances "
                            "WHERE matched AND wait_us > 0")
    assert waited == [{"rank": 0, "name": "recv", "start_us": 1045.0, "end_us": 1600.0, "last_rank": 1,
                       "wait_us": 455.0}]


def test_carried_in_nccl_kernels_are_nodes_of_their_own(carry_db):
    """Rank 0's step 2 carries in A and B (stream 20) and K1, K2 (stream 7): four nodes, each
    holding one kernel, where one node per stream held two."""
    carried = rows(carry_db, "SELECT stream, label, start_us, end_us, event_count FROM nodes "
                             "WHERE method = 'ctda' AND rank = 0 AND step = 2 AND carry_in ORDER BY start_us")
    assert [(c["stream"], c["label"], c["start_us"], c["end_us"], c["event_count"]) for c in carried] == [
        (20, NCCL, 800, 1040, 1), (7, "k1_consumes_a", 1042, 1100, 1), (20, NCCL, 1045, 1600, 1),
        (7, "k2_consumes_b", 1602, 1700, 1)]


def test_the_ctda_path_runs_through_the_receive_that_waited(carry_db):
    """The derivation above: A, B, K2, the wait return, add_, K3; 738 us of 760."""
    assert path_rows(carry_db, "ctda", 0, 2) == [
        (0, NCCL, 1000, 1040, 40), (0, NCCL, 1045, 1600, 555), (0, "k2_consumes_b", 1602, 1700, 98),
        (0, "after cudaDeviceSynchronize", 1702, 1702, 0), (0, "aten::add_", 1705, 1710, 5),
        (0, "k3", 1720, 1760, 40)]
    (cpcr,) = rows(carry_db, "SELECT cpcr FROM cpcr_rows WHERE method = 'ctda' AND rank = 0 AND step = 2")
    assert cpcr["cpcr"] == pytest.approx(738 / STEP2_WINDOW_US)


def test_the_cross_rank_path_leaves_at_the_gate_for_the_late_sender(carry_db):
    """Rank 0 from its step's end back to rank 1's arrival at 1500, then rank 1's KS: 741 us."""
    segments = rows(carry_db, "SELECT hop, rank, from_us, to_us, gate_pg, gate_seq FROM cross_rank_segments "
                              "WHERE step = 2 ORDER BY hop")
    assert [tuple(s.values()) for s in segments] == [(1, 0, 1500, 1760, "default:1->0", 2),
                                                     (2, 1, 1000, 1500, None, None)]
    assert path_rows(carry_db, "cross_rank", 0, 2) == [
        (1, "ks_makes_b", 1000, 1498, 498), (0, NCCL, 1500, 1600, 100), (0, "k2_consumes_b", 1602, 1700, 98),
        (0, "after cudaDeviceSynchronize", 1702, 1702, 0), (0, "aten::add_", 1705, 1710, 5),
        (0, "k3", 1720, 1760, 40)]
    (cpcr,) = rows(carry_db, "SELECT cpcr FROM cpcr_rows WHERE method = 'cross_rank' AND step = 2")
    assert cpcr["cpcr"] == pytest.approx(741 / STEP2_WINDOW_US)


def test_the_coupled_what_if_moves_the_carried_in_receive_with_the_late_sender(carry_db):
    """The derivation above: the unchanged replay reproduces both ranks, and with KS halved
    rank 0's step 2 takes 416 us and rank 1's 306 us."""
    def steps(scenario):
        return {(r[1], r[2]): (r[3], round(r[5], 3)) for r in whatif(carry_db, scenario=scenario, persist=False).steps}
    assert steps(Scenario()) == {(0, 1): (1000, 1000), (0, 2): (760, 760), (1, 1): (1000, 1000), (1, 2): (650, 650)}
    faster = Scenario(scales=(Scale("ks_makes_b", 0.5, None, (1,)),))
    assert steps(faster) == {(0, 1): (1000, 1000), (0, 2): (760, 416), (1, 1): (1000, 1000), (1, 2): (650, 306)}


def test_the_hand_made_job_keeps_every_path_invariant(carry_db):
    assert broken_invariants(carry_db) == {}


# ---- pipeline_nccl (tests/data/cuda/parallel, tests/engine/test_engine_cuda_parallel.py) ---------------

@pytest.fixture(scope="module")
def pipeline_db(tmp_path_factory):
    con = analysed_db(tmp_path_factory.mktemp("pipeline_nccl") / "pipeline.duckdb",
                      {"pipeline_nccl": [PARALLEL / "pipeline_nccl"]})
    create_cpcr_rows(con)
    yield con
    con.close()


def test_pipeline_nccl_carries_in_every_nccl_kernel_as_a_node_of_its_own(pipeline_db):
    """Rank 0's CPU runs about a step ahead of its GPU: its step-4 window starts with 9 NCCL
    kernels in flight or queued (step 2's last receive, step 3's 4 sends and 4 receives), one
    node per stream before. Now each is a node of its own, on every rank and step."""
    carried = rows(pipeline_db, """
        SELECT rank, step, count(*) AS nodes, max(event_count) AS most_events
        FROM nodes WHERE method = 'ctda' AND carry_in AND starts_with(label, 'ncclDevKernel') GROUP BY ALL""")
    assert {(c["rank"], c["step"]): (c["nodes"], c["most_events"]) for c in carried} == {
        (0, 2): (2, 1), (0, 3): (4, 1), (0, 4): (9, 1)}
    # the NCCL kernels that ran inside each of rank 0's step-4 carry-in nodes on the NCCL stream
    kernels = rows(pipeline_db, """
        SELECT n.node_id, count(*) AS kernels FROM nodes n
        JOIN events e ON e.run_id = n.run_id AND e.rank = n.rank AND e.stream = n.stream
             AND starts_with(e.name, 'ncclDevKernel') AND e.ts_us >= n.start_us AND e.end_us <= n.end_us
        WHERE n.method = 'ctda' AND n.carry_in AND n.rank = 0 AND n.step = 4
        GROUP BY n.node_id""")
    assert [k["kernels"] for k in kernels] == [1] * 9


def test_pipeline_nccl_step_3_receives_are_on_rank_0s_step_4_path(pipeline_db):
    """Step 3's receives (channel 0:1->0, seq 5-8) ran in rank 0's step-4 window and waited
    2.8, 4.3, 1.6 and 1.7 ms for rank 1's sends. Each is a node of the ctda path there, counted
    from its kernel's start to its end; before, one carried-in node per stream held them and
    the compute between them, and the path went from the first receive to that compute node."""
    receives = rows(pipeline_db, """
        SELECT i.seq, i.start_us, i.end_us, i.wait_us, c.counted_start_us, c.counted_end_us, c.counted_us
        FROM collective_instances i
        JOIN path_events e ON e.run_id = i.run_id AND e.rank = i.rank AND e.event_id = i.exec_event_id
             AND e.method = 'ctda' AND e.step = 4
        JOIN critical_path c ON c.run_id = e.run_id AND c.rank = e.rank AND c.step = e.step AND c.method = e.method
             AND c.node_rank = e.node_rank AND c.node_id = e.node_id
        JOIN nodes n ON n.run_id = c.run_id AND n.rank = c.rank AND n.step = c.step AND n.method = 'ctda'
             AND n.node_id = c.node_id
        WHERE i.rank = 0 AND i.pg = '0:1->0' AND i.step = 3 AND n.carry_in AND n.event_count = 1
        ORDER BY i.seq""")
    assert [r["seq"] for r in receives] == [5, 6, 7, 8]
    assert [round(r["wait_us"]) for r in receives] == [2790, 4326, 1603, 1729]
    for r in receives:
        assert (r["counted_start_us"], r["counted_end_us"]) == (r["start_us"], r["end_us"])
        assert r["counted_us"] == pytest.approx(r["end_us"] - r["start_us"])


def test_pipeline_nccl_keeps_every_path_invariant(pipeline_db):
    """The path moves back in time, counted time never overlaps, 0 < CPCR <= 1, per_thread
    never beats ctda on coverage (tests/invariants.py)."""
    assert broken_invariants(pipeline_db) == {}
    cpcr = {(r["method"], r["rank"], r["step"]): round(r["cpcr"], 3) for r in rows(
        pipeline_db, "SELECT method, rank, step, cpcr FROM cpcr_rows WHERE method IN ('ctda', 'cross_rank')")}
    # rank 0's steps 3 and 4 begin with their carry-in (0.846 and 0.602 before: the path left
    # the receives at the first one); the cross-rank path, on rank 1 in steps 2 and 3 and
    # leaving rank 0 at step 4's last receive, is what it was
    assert cpcr == {("ctda", 0, 2): 0.673, ("ctda", 0, 3): 0.987, ("ctda", 0, 4): 0.956,
                    ("ctda", 1, 2): 0.682, ("ctda", 1, 3): 0.688, ("ctda", 1, 4): 0.656,
                    ("cross_rank", 1, 2): 0.682, ("cross_rank", 1, 3): 0.688, ("cross_rank", 0, 4): 0.332}
