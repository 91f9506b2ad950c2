"""The engine on real CUDA traces of sharded, pipelined and compiled training, recorded on one
H100 by scripts/record_cuda_parallel.py (tests/data/cuda/parallel), 3 profiled steps each:

- `fsdp` (two rank files): FSDP2 on two ranks over NCCL, both on the one GPU (NCCL over its
  socket transport); per rank and step 9 all-gathers and 5 reduce-scatters on FSDP's own
  streams. Over loopback sockets each collective takes ~4.5 ms: the steps are comm-bound.
- `bf16_compile`: bf16 autocast and torch.compile (Triton kernels, CompiledFunction ops;
  the compile ran before the profiler); `bf16_eager`: the same model and batch, eager.
- `pipeline` (two rank files): a 2-stage GPipe pipeline, two processes on the one GPU, 4
  micro-batches per step, activations and gradients sent with blocking gloo send/recv,
  staged through the host (a device-to-host copy before each send).
- `pipeline_nccl` (two rank files, recorded on one H200): the same pipeline over NCCL
  point-to-point, the CUDA tensors sent as they are: each dist.send / dist.recv launches an
  ncclDevKernel_SendRecv on the NCCL stream, and its Work's wait() writes a
  record_param_comms 'wait' of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctda_sql.whatif.replay import whatif

from helpers.db import analysed_db, report, rows
from invariants import (
    BLOCKING_SHARE_SQL,
    DEVICE_WITHOUT_NODES_SQL,
    MISSED_HANDOFF_SQL,
    broken_invariants,
    create_cpcr_rows,
    hotspots_kept,
    top_names,
)

PARALLEL = Path(__file__).parents[1] / "data" / "cuda" / "parallel"
RUNS = {"fsdp": PARALLEL / "fsdp", "bf16_compile": PARALLEL / "bf16_compile.json.gz",
        "bf16_eager": PARALLEL / "bf16_eager.json.gz", "pipeline": PARALLEL / "pipeline",
        "pipeline_nccl": PARALLEL / "pipeline_nccl"}
MULTI_RANK = ("fsdp", "pipeline", "pipeline_nccl")
STEPS = {2, 3, 4}
# a step is GPU-bound when its `loss.item()` blocked the CPU this long for the GPU to finish
BLOCKED_SYNC_US = 500.0


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    con = analysed_db(tmp_path_factory.mktemp("cuda_parallel") / "parallel.duckdb",
                      {name: [path] for name, path in RUNS.items()})
    create_cpcr_rows(con)
    yield con
    con.close()


def coverage(con, run: str, method: str) -> dict[tuple[int, int], float]:
    """(rank, step) -> CPCR of `method`'s path in `run`."""
    return {(r["rank"], r["step"]): r["cpcr"] for r in rows(
        con, "SELECT rank, step, cpcr FROM cpcr_rows WHERE run = ? AND method = ?", [run, method])}


def blocked_steps(con, run: str) -> set[int]:
    """Steps of `run` in which a cudaStreamSynchronize blocked the CPU BLOCKED_SYNC_US or more."""
    return {step for (step,) in con.execute(
        "SELECT DISTINCT w.step FROM events e JOIN runs r USING (run_id) "
        "JOIN analysis_windows w ON w.run_id = e.run_id AND w.rank = e.rank "
        "  AND e.ts_us >= w.start_us AND e.ts_us < w.e2e_end_us "
        "WHERE r.name = ? AND e.name = 'cudaStreamSynchronize' AND e.dur_us >= ?",
        [run, BLOCKED_SYNC_US]).fetchall()}


# ---- every run ---------------------------------------------------------------------------------

def test_every_run_keeps_every_path_invariant(db):
    assert broken_invariants(db) == {}


def test_every_profiled_step_of_every_rank_gets_a_path(db):
    ranks = {(r["run"], r["rank"], r["source"]) for r in rows(
        db, "SELECT r.name AS run, t.rank, t.rank_source AS source FROM traces t JOIN runs r USING (run_id)")}
    assert ranks == {("bf16_compile", 0, "default"), ("bf16_eager", 0, "default"),
                     *((run, rank, "distributedInfo") for run in MULTI_RANK for rank in (0, 1))}
    paths = rows(db, "SELECT r.name AS run, c.rank, c.method, list(DISTINCT c.step) AS steps "
                     "FROM critical_path c JOIN runs r USING (run_id) GROUP BY ALL")
    found = {(p["run"], p["rank"], p["method"]): set(p["steps"]) for p in paths}
    for run, rank, _ in ranks:
        assert found[(run, rank, "ctda")] == STEPS, (run, rank)
    # one cross-rank path per step, from the rank whose step ended last
    for run in MULTI_RANK:
        assert set().union(*(s for (r, _, m), s in found.items() if r == run and m == "cross_rank")) == STEPS
    assert db.execute(DEVICE_WITHOUT_NODES_SQL).fetchall() == []
    assert db.execute(MISSED_HANDOFF_SQL).fetchall() == []


def test_syncs_and_staging_copies_never_count_as_cpu_work(db):
    """`loss.item()` and the pipeline's `.cpu()` before each send block the CPU: that time
    belongs to the GPU work waited for, not to the call."""
    shares = dict(db.execute(BLOCKING_SHARE_SQL).fetchall())
    assert shares.keys() == RUNS.keys()
    assert {run: share for run, share in shares.items() if (share or 0) > 0.05} == {}


def test_top_hotspots_are_stable_as_the_hand_off_tolerance_goes_from_15_to_100us(db):
    assert hotspots_kept(db) == {}


def test_the_unchanged_whatif_replay_reproduces_every_step(db):
    off = {}
    for run in RUNS:
        replayed_steps = whatif(db, run=run, persist=False).steps
        assert len(replayed_steps) == 3 * (2 if run in MULTI_RANK else 1)
        for _run, rank, step, measured, replayed, *_ in replayed_steps:
            if abs(replayed - measured) > 0.01 * measured:
                off[(run, rank, step)] = (measured, replayed)
    assert off == {}


# ---- fsdp --------------------------------------------------------------------------------------

def test_fsdp_collectives_are_nodes_on_streams_of_their_own(db):
    """Every all-gather and reduce-scatter kernel is a device node of its own, on a stream that
    carries nothing else (FSDP's all-gather and reduce-scatter streams), every step and rank."""
    streams = rows(db, """
        SELECT n.rank, n.step, n.stream,
               count(*) FILTER (WHERE starts_with(n.label, 'ncclDevKernel_AllGather')) AS all_gathers,
               count(*) FILTER (WHERE starts_with(n.label, 'ncclDevKernel_ReduceScatter')) AS reduce_scatters,
               count(*) FILTER (WHERE NOT starts_with(n.label, 'nccl')) AS others,
               max(n.event_count) FILTER (WHERE starts_with(n.label, 'nccl')) AS most_events
        FROM nodes n JOIN runs r USING (run_id)
        WHERE r.name = 'fsdp' AND n.method = 'ctda' AND n.kind = 'gpu' GROUP BY ALL""")
    for rank in (0, 1):
        for step in STEPS:
            mine = [s for s in streams if (s["rank"], s["step"]) == (rank, step)]
            gather = [s for s in mine if s["all_gathers"]]
            scatter = [s for s in mine if s["reduce_scatters"]]
            assert [(s["all_gathers"], s["others"]) for s in gather] == [(9, 0)], (rank, step)
            assert [(s["reduce_scatters"], s["others"]) for s in scatter] == [(5, 0)], (rank, step)
            assert gather[0]["stream"] != scatter[0]["stream"]
            assert gather[0]["most_events"] == scatter[0]["most_events"] == 1
            assert any(s["others"] for s in mine)  # the compute stream is another


def test_fsdp_matches_every_collective_across_the_two_ranks(db):
    instances = rows(db, "SELECT i.rank, i.name, i.executed_on, count(*) AS n, count(*) FILTER (WHERE matched) AS matched "
                         "FROM collective_instances i JOIN runs r USING (run_id) WHERE r.name = 'fsdp' "
                         "GROUP BY ALL ORDER BY ALL")
    assert [(i["rank"], i["name"], i["executed_on"], i["n"], i["matched"]) for i in instances] == [
        (rank, name, "nccl_kernel", n, n) for rank in (0, 1)
        for name, n in (("allgather_base", 27), ("reduce_scatter_base", 15))]
    assert report(db, "unmatched_collectives", run="fsdp") == []


def test_fsdp_comm_bound_steps_run_through_the_collectives(db):
    """Collectives over loopback sockets decide the step: the path covers it, its top hotspots
    are the NCCL kernels, and it hands over from an NCCL stream to another stream over a
    recorded stream wait in every step of every rank."""
    assert min(coverage(db, "fsdp", "ctda").values()) > 0.9
    top = top_names(db, top=2)["fsdp"]
    assert sorted(name.split("(")[0] for name in top) == [
        "ncclDevKernel_AllGather_RING_LL", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"]
    hand_offs = rows(db, """
        SELECT c.rank, c.step, count(*) AS n
        FROM critical_path c JOIN runs r USING (run_id)
        JOIN critical_path nxt ON nxt.run_id = c.run_id AND nxt.rank = c.rank AND nxt.step = c.step
             AND nxt.method = c.method AND nxt.seq = c.seq + 1
        JOIN nodes a ON a.run_id = c.run_id AND a.rank = c.rank AND a.step = c.step AND a.method = c.method
             AND a.node_id = c.node_id
        JOIN nodes b ON b.run_id = c.run_id AND b.rank = c.rank AND b.step = c.step AND b.method = c.method
             AND b.node_id = nxt.node_id
        WHERE r.name = 'fsdp' AND c.method = 'ctda' AND c.edge_type = 'sync'
          AND starts_with(a.label, 'nccl') AND b.kind = 'gpu' AND b.stream <> a.stream
        GROUP BY ALL""")
    assert {(h["rank"], h["step"]) for h in hand_offs} == {(rank, step) for rank in (0, 1) for step in STEPS}


def test_fsdp_cross_rank_path_visits_both_ranks_every_step(db):
    ranks = rows(db, "SELECT c.step, count(DISTINCT c.node_rank) AS ranks FROM critical_path c JOIN runs r USING (run_id) "
                     "WHERE r.name = 'fsdp' AND c.method = 'cross_rank' GROUP BY ALL")
    assert {(r["step"], r["ranks"]) for r in ranks} == {(step, 2) for step in STEPS}


FSDP_KERNEL_OVERLAP_SQL = """
    WITH ops AS (
        SELECT e.rank, e.ts_us - CASE WHEN ? THEN coalesce(t.clock_offset_us, 0) ELSE 0 END AS s,
               e.end_us - CASE WHEN ? THEN coalesce(t.clock_offset_us, 0) ELSE 0 END AS e
        FROM events e JOIN runs r USING (run_id) JOIN traces t ON t.run_id = e.run_id AND t.rank = e.rank
        WHERE r.name = 'fsdp' AND e.ph = 'X' AND is_gpu_work(e.cat) AND NOT starts_with(e.name, 'nccl'))
    SELECT coalesce(sum(least(a.e, b.e) - greatest(a.s, b.s)), 0)
    FROM ops a JOIN ops b ON a.rank = 0 AND b.rank = 1 AND a.s < b.e AND b.s < a.e"""


@pytest.mark.xfail(strict=True, reason=(
    "clock alignment without host_name on a shared GPU: torch 2.11 writes no host_name, so the "
    "two fsdp ranks get clocks estimated from the ends of their matched NCCL kernels (the median "
    "end difference). Both processes ran on one GPU, whose contexts take turns in ~2 ms time "
    "slices: the rank whose kernel ran first ends a slice after the other, so the end differences "
    "are bimodal (-2.1 ms or +2.1 ms; the causal bounds allow -2.3..+2.3 ms) and the median picks "
    "one side: traces.clock_offset_us of rank 1 is -2036 us where the true offset is ~0. Aligned "
    "so, the two ranks' GEMMs overlap for 5.2 ms, and waiting_on charges rank 1 with 49.7 ms of "
    "waiting in step 4 (8.5 ms in steps 2 and 3) where the raw clocks give ~29.7 ms in each. "
    "Ranks on GPUs of their own end a collective together; sql/crossrank/20_match.sql (_cr_offsets)"))
def test_fsdp_ranks_on_one_gpu_are_aligned_so_their_kernels_never_overlap(db):
    """Both ranks ran on one GPU, whose two contexts take turns: no compute kernel of one rank
    runs while one of the other does. Their raw clocks (one host) show exactly that, and the
    clocks the engine aligns ranks with must too."""
    raw = db.execute(FSDP_KERNEL_OVERLAP_SQL, [False, False]).fetchone()[0]
    assert raw == 0
    aligned = db.execute(FSDP_KERNEL_OVERLAP_SQL, [True, True]).fetchone()[0]
    assert aligned < 50


# ---- bf16 autocast: compiled and eager ---------------------------------------------------------

def test_compiled_graphs_run_every_step_on_the_path_and_every_triton_kernel_has_its_launch(db):
    """The trace holds the compiled graphs' runs, not the compile: one region (0/0, never
    recompiled), its forward and backward graph called once a step; the ops that run them are
    on every step's path, and each Triton kernel is linked to its cuLaunchKernel."""
    calls = dict(db.execute(
        "SELECT e.name, count(*) FROM events e JOIN runs r USING (run_id) WHERE r.name = 'bf16_compile' "
        "AND (e.name LIKE '%Compiled%' OR e.name LIKE '%Dynamo%' OR e.name LIKE '%compile%') GROUP BY ALL").fetchall())
    graphs = [name for name in calls if name.startswith("## Call CompiledFxGraph")]
    assert len(graphs) == 2 and {calls.pop(name) for name in graphs} == {3}
    assert calls == {"Torch-Compiled Region: 0/0": 3, "TorchDynamo Cache Lookup": 3, "CompiledFunction": 3,
                     "CompiledFunctionBackward": 3, "autograd::engine::evaluate_function: CompiledFunctionBackward": 3}
    on_path = rows(db, "SELECT p.name, list(DISTINCT p.step) AS steps FROM path_events p JOIN runs r USING (run_id) "
                       "WHERE r.name = 'bf16_compile' AND p.method = 'ctda' "
                       "AND p.name IN ('CompiledFunction', 'CompiledFunctionBackward') GROUP BY ALL")
    assert {(p["name"], frozenset(p["steps"])) for p in on_path} == {
        ("CompiledFunction", frozenset(STEPS)), ("CompiledFunctionBackward", frozenset(STEPS))}
    kernels = rows(db, "SELECT count(*) AS n, count(launch_event_id) AS launched, "
                       "list(DISTINCT launch_name) AS launches FROM analysis_gpu_ops g JOIN runs r USING (run_id) "
                       "WHERE r.name = 'bf16_compile' AND starts_with(g.name, 'triton_')")[0]
    assert kernels["n"] > 0 and kernels["launched"] == kernels["n"] and kernels["launches"] == ["cuLaunchKernel"]


def test_gpu_bound_compiled_steps_run_through_the_triton_kernels(db):
    """Where `loss.item()` waited for the GPU, the compiled backward's kernels decide the step:
    the path runs through them (Triton kernels among them) and kernels hold most of it."""
    bound = blocked_steps(db, "bf16_compile")
    assert len(bound) >= 2
    on_path = {r["step"]: r for r in rows(db, """
        SELECT p.step, count(*) FILTER (WHERE p.cat = 'kernel' AND starts_with(p.name, 'triton_')) AS triton,
               sum(p.self_us) FILTER (WHERE is_gpu_work(p.cat)) / sum(p.self_us) AS device_share
        FROM path_events p JOIN runs r USING (run_id)
        WHERE r.name = 'bf16_compile' AND p.method = 'ctda' GROUP BY ALL""")}
    for step in bound:
        assert on_path[step]["triton"] >= 10, step
        assert on_path[step]["device_share"] > 0.5, step


def test_eager_bf16_steps_are_launch_bound_and_the_path_says_so(db):
    """Eager, the same model launches ~1000 ops a step: the GPU idles between them (over 20%
    of every step) and never makes `loss.item()` wait, so the path is the CPU's work."""
    assert blocked_steps(db, "bf16_eager") == set()
    steps = rows(db, """
        WITH busy AS (
            SELECT w.step, sum(e.dur_us) / any_value(w.window_us) AS busy
            FROM events e JOIN runs r USING (run_id)
            JOIN analysis_windows w ON w.run_id = e.run_id AND w.rank = e.rank
                 AND e.ts_us >= w.start_us AND e.ts_us < w.e2e_end_us
            WHERE r.name = 'bf16_eager' AND e.ph = 'X' AND is_gpu_work(e.cat) GROUP BY ALL),
        path AS (
            SELECT p.step, sum(p.self_us) FILTER (WHERE NOT is_gpu_work(p.cat)) / sum(p.self_us) AS host_share
            FROM path_events p JOIN runs r USING (run_id)
            WHERE r.name = 'bf16_eager' AND p.method = 'ctda' GROUP BY ALL)
        SELECT * FROM busy JOIN path USING (step)""")
    assert {s["step"] for s in steps} == STEPS
    assert all(s["busy"] < 0.8 and s["host_share"] > 0.8 for s in steps), steps


# ---- pipeline ----------------------------------------------------------------------------------

def test_pipeline_pairs_every_send_with_its_recv(db):
    """3 steps x 4 micro-batches: each rank sends 12 tensors and receives 12, on two channels
    (activations 0->1, gradients 1->0), paired by channel order with the peer's call."""
    instances = rows(db, "SELECT i.rank, i.pg, i.name, count(*) AS n, count(*) FILTER (WHERE matched) AS matched, "
                         "list(DISTINCT bytes) AS sizes FROM collective_instances i JOIN runs r USING (run_id) "
                         "WHERE r.name = 'pipeline' GROUP BY ALL ORDER BY ALL")
    assert [(i["rank"], i["pg"], i["name"], i["n"], i["matched"]) for i in instances] == [
        (0, "0:0->1", "send", 12, 12), (0, "0:1->0", "recv", 12, 12),
        (1, "0:0->1", "recv", 12, 12), (1, "0:1->0", "send", 12, 12)]
    assert all(i["sizes"] == [1024 * 512 * 4] for i in instances)  # a micro-batch's fp32 activation
    assert report(db, "unmatched_collectives", run="pipeline") == []


def assert_cross_rank_path_crosses_the_stages_and_covers_more_than_either(db, run: str) -> None:
    """Each step's cross-rank path of `run` hops between the stages at a send/recv and explains
    more of the step than either rank's own path."""
    hops = rows(db, "SELECT s.step, count(*) FILTER (WHERE s.gate_pg LIKE '%->%') AS p2p_hops, "
                    "count(DISTINCT s.rank) AS ranks FROM cross_rank_segments s JOIN runs r USING (run_id) "
                    "WHERE r.name = ? GROUP BY ALL", [run])
    assert {h["step"] for h in hops} == STEPS
    assert all(h["p2p_hops"] >= 1 and h["ranks"] == 2 for h in hops), hops
    cross = {step: cpcr for (_, step), cpcr in coverage(db, run, "cross_rank").items()}
    own = coverage(db, run, "ctda")
    assert cross.keys() == STEPS
    assert all(cross[step] > max(own[(0, step)], own[(1, step)]) for step in STEPS), (cross, own)


def test_pipeline_cross_rank_path_crosses_the_stages_and_covers_more_than_either(db):
    """Each step's cross-rank path hops between the stages at the sends/recvs one waited on,
    and so explains more of the step than either rank's own path, which sees only waiting."""
    assert_cross_rank_path_crosses_the_stages_and_covers_more_than_either(db, "pipeline")


# ---- pipeline over NCCL point-to-point -----------------------------------------------------------

P2P_CHANNELS = [(0, "0:0->1", "send"), (0, "0:1->0", "recv"), (1, "0:0->1", "recv"), (1, "0:1->0", "send")]


def test_pipeline_nccl_send_recv_kernels_are_nodes_on_a_stream_of_their_own(db):
    """Every step of both ranks: the 4 sends and 4 recvs of the step are one ncclDevKernel_SendRecv
    each, a device node of its own, on the NCCL stream, which carries no other kernel; the
    compute kernels run on another stream. (Rank 0's CPU runs ahead of its GPU, so its
    recvs of a step run on in the next step's window, where they are carry-in.)"""
    streams = rows(db, """
        SELECT n.rank, n.step, n.stream,
               count(*) FILTER (WHERE starts_with(n.label, 'ncclDevKernel_SendRecv') AND NOT n.carry_in) AS p2p,
               count(*) FILTER (WHERE NOT starts_with(n.label, 'nccl')) AS others,
               max(n.event_count) FILTER (WHERE starts_with(n.label, 'nccl') AND NOT n.carry_in) AS most_events
        FROM nodes n JOIN runs r USING (run_id)
        WHERE r.name = 'pipeline_nccl' AND n.method = 'ctda' AND n.kind = 'gpu' GROUP BY ALL""")
    for rank in (0, 1):
        for step in STEPS:
            mine = [s for s in streams if (s["rank"], s["step"]) == (rank, step)]
            nccl = [s for s in mine if s["p2p"]]
            assert [(s["p2p"], s["others"], s["most_events"]) for s in nccl] == [(8, 0, 1)], (rank, step, mine)
            assert any(s["others"] and s["stream"] != nccl[0]["stream"] for s in mine), (rank, step)
    # every kernel has its launch (cuLaunchKernelEx) in the trace, but for 2 of rank 0's recvs
    # of step 1 that ran late: launched in the warmup step, before the trace's CPU events
    launched = rows(db, """
        SELECT g.rank, count(*) AS n, count(l.event_id) AS launched,
               list(DISTINCT l.name) FILTER (WHERE l.name IS NOT NULL) AS launches
        FROM events g JOIN runs r USING (run_id)
        LEFT JOIN events l ON l.run_id = g.run_id AND l.rank = g.rank AND l.correlation = g.correlation
             AND is_runtime_category(l.cat)
        WHERE r.name = 'pipeline_nccl' AND starts_with(g.name, 'ncclDevKernel') GROUP BY ALL ORDER BY ALL""")
    assert [(k["rank"], k["n"], k["launched"], k["launches"]) for k in launched] == [
        (0, 26, 24, ["cuLaunchKernelEx"]), (1, 24, 24, ["cuLaunchKernelEx"])]


def test_pipeline_nccl_pairs_every_send_with_its_recv(db):
    """3 steps x 4 micro-batches: each rank sends 12 device tensors and receives 12, on two
    channels (activations 0->1, gradients 1->0), each executed as its NCCL kernel and paired
    by channel order with the peer's, 4 a channel and step."""
    instances = rows(db, "SELECT i.rank, i.pg, i.name, i.step, i.executed_on, count(*) AS n, "
                         "count(*) FILTER (WHERE matched) AS matched, list(DISTINCT bytes) AS sizes "
                         "FROM collective_instances i JOIN runs r USING (run_id) "
                         "WHERE r.name = 'pipeline_nccl' AND i.pg LIKE '%->%' GROUP BY ALL ORDER BY ALL")
    assert [(i["rank"], i["pg"], i["name"], i["step"], i["executed_on"], i["n"], i["matched"]) for i in instances] == [
        (rank, pg, name, step, "nccl_kernel", 4, 4) for rank, pg, name in P2P_CHANNELS for step in sorted(STEPS)]
    assert all(i["sizes"] == [1024 * 512 * 4] for i in instances)  # a micro-batch's fp32 activation
    # the two processes share one host's clock, and point-to-point ends give no offset:
    # the ranks are left unshifted
    offsets = db.execute("SELECT t.rank, t.clock_offset_us FROM traces t JOIN runs r USING (run_id) "
                         "WHERE r.name = 'pipeline_nccl' ORDER BY t.rank").fetchall()
    assert [(rank, offset or 0) for rank, offset in offsets] == [(0, 0), (1, 0)]


def test_pipeline_nccl_leaves_only_the_kernels_launched_before_the_trace_unmatched(db):
    """The only instances without a partner are 2 SendRecv kernels that ran on rank 0's GPU in
    step 2 but were launched in the warmup step (no launch, no call in the trace): gradients of
    step 1, whose sends rank 1 made before its trace began."""
    unmatched = report(db, "unmatched_collectives", run="pipeline_nccl")
    assert [(u["rank"], u["step"], u["executed_on"], u["name"], u["reason"]) for u in unmatched] == [
        (0, 2, "nccl_kernel", "sendrecv", "no partner on rank 1")] * 2


def test_pipeline_nccl_cross_rank_path_hops_only_where_a_rank_waited(db):
    """Only step 4's path crosses the stages, once: at rank 0's recv of the step's last gradient
    (channel 0:1->0 seq 12), whose kernel ran 60261..62761 us, 1866 us of it waiting for rank
    1's send, which arrived at 62126. No send is a gate: each of the 11 sends whose peer arrived
    more than 50 us later (rank 0's 0:0->1 seq 2-6 and 8-12, rank 1's 0:1->0 seq 2) had returned
    0.67-2.17 ms before its receiver arrived (NCCL buffered the 2 MiB message), so its sender
    waited for nothing: their wait_us is 0, where the recvs that waited keep theirs. Read as
    gates, they made step 2 cross twice: at rank 1's send seq 2 (14201..14285 us, rank 0's recv
    at 15070) into rank 0, and back at rank 0's send seq 4."""
    segments = rows(db, "SELECT s.step, s.hop, s.rank, s.from_us, s.to_us, s.gate_pg, s.gate_seq "
                        "FROM cross_rank_segments s JOIN runs r USING (run_id) "
                        "WHERE r.name = 'pipeline_nccl' ORDER BY s.step, s.hop")
    assert [(s["step"], s["hop"], s["rank"], round(s["from_us"]), round(s["to_us"]), s["gate_pg"], s["gate_seq"])
            for s in segments] == [(2, 1, 1, 2212, 23334, None, None), (3, 1, 1, 23334, 43627, None, None),
                                   (4, 1, 0, 62126, 63358, "0:1->0", 12), (4, 2, 1, 43627, 62126, None, None)]
    # every matched side whose peer arrived more than 50 us later, with that arrival (the
    # ranks share one clock, offset 0)
    late = rows(db, """
        SELECT i.rank, i.pg, i.seq, i.name, i.start_us, i.end_us, i.wait_us, p.start_us AS arrival_us
        FROM collective_instances i JOIN runs r USING (run_id)
        JOIN collective_instances p ON p.run_id = i.run_id AND p.pg = i.pg AND p.seq = i.seq AND p.rank = i.last_rank
        WHERE r.name = 'pipeline_nccl' AND i.matched AND p.start_us - i.start_us > 50 ORDER BY i.pg, i.seq""")
    (gate,) = [w for w in late if (w["rank"], w["pg"], w["seq"]) == (0, "0:1->0", 12)]
    assert gate["name"] == "recv" and gate["end_us"] > gate["arrival_us"]
    assert (round(gate["start_us"]), round(gate["arrival_us"]), round(gate["end_us"])) == (60261, 62126, 62761)
    assert gate["wait_us"] == pytest.approx(gate["arrival_us"] - gate["start_us"]) and round(gate["wait_us"]) == 1866
    # the recvs wait from their start to the send's arrival; the sends waited for nothing
    assert all(w["wait_us"] == pytest.approx(w["arrival_us"] - w["start_us"]) for w in late if w["name"] == "recv")
    sends = [w for w in late if w["name"] == "send"]
    assert [(w["rank"], w["pg"], w["seq"]) for w in sends] == [
        *((0, "0:0->1", seq) for seq in (2, 3, 4, 5, 6, 8, 9, 10, 11, 12)), (1, "0:1->0", 2)]
    assert [w["wait_us"] for w in sends] == [0] * 11
    early = [w["arrival_us"] - w["end_us"] for w in sends]
    assert 660 < min(early) and max(early) < 2170, early


def test_pipeline_nccl_cross_rank_path_follows_the_host_bound_stage_and_counts_no_wait_as_work(db):
    """Rank 1 (stage 1) is host-bound: it makes rank 0 wait, and its CPU never blocks on a
    transfer. Steps 2 and 3 end last on rank 1 (23334 and 43627 us, rank 0's windows end at 12248
    and 23114), and rank 1's path reaches no collective that waited: its two recvs that waited
    (0:0->1 seq 1 in step 2, 2615 us; seq 7 in step 3, 1570 us) waited on its GPU while its CPU
    went on. So both paths stay on rank 1 and are its own ctda path, row for row (CPCR
    0.682, 0.688). Step 4 ends last on rank 0 (63358 against 62447 us): the path runs back to the
    recv it waited in (seq 12), counts that recv's kernel only from rank 1's arrival, and goes on
    with rank 1's step-4 path back to its window start at 43627. It counts no collective's
    waiting as work, where rank 0's own step-4 path (CPCR 0.956) counts 21.4 ms of its recvs
    waiting for rank 1: seq 9-12, and step 3's seq 5-8, carried into the window, each a node of
    its own (issue 42 item 4). Rank 0's step windows lead by about a step, so its 40244 us
    step-4 window begins 20513 us before rank 1's: that time was rank 1's step 3, on step 3's
    path already, and stays unexplained (slack_before) rather than counted twice: CPCR 0.332.
    (The expectation this replaces, that every step crosses and covers more than either rank's
    own path, cannot be met honestly: step 3's path could cross only where nothing waited, and
    step 4's would need over 0.656 x 40244 = 26400 us counted, where 19731 us of the step remain
    after rank 1's step-4 window begins; the rest is waiting or rank 1's step 3.)"""
    cross = {step: cpcr for (_, step), cpcr in coverage(db, "pipeline_nccl", "cross_rank").items()}
    own = coverage(db, "pipeline_nccl", "ctda")
    assert cross.keys() == STEPS

    def path(method, step):
        return [tuple(r.values()) for r in rows(db, """
            SELECT c.rank, c.node_rank, c.node_id, c.counted_start_us, c.counted_end_us, c.counted_us
            FROM critical_path c JOIN runs r USING (run_id)
            WHERE r.name = 'pipeline_nccl' AND c.method = ? AND c.step = ? ORDER BY c.seq""", [method, step])]
    for step in (2, 3):
        assert path("cross_rank", step) == [p for p in path("ctda", step) if p[0] == 1], step
        assert cross[step] == pytest.approx(own[(1, step)])
    assert {step: round(c, 3) for step, c in cross.items()} == {2: 0.682, 3: 0.688, 4: 0.332}

    # time before a collective's last arrival, on a node executing one that was still running
    # then (a buffered send's wait is 0: it counts none)
    waited = rows(db, """
        SELECT c.method, c.rank, c.step,
               sum(greatest(0, least(c.counted_end_us, i.start_us + i.wait_us) - c.counted_start_us)) AS waited_us
        FROM critical_path c JOIN runs r USING (run_id)
        JOIN path_events e ON e.run_id = c.run_id AND e.rank = c.rank AND e.step = c.step AND e.method = c.method
             AND e.node_rank = c.node_rank AND e.node_id = c.node_id
        JOIN collective_instances i ON i.run_id = c.run_id AND i.rank = c.node_rank AND i.exec_event_id = e.event_id
        WHERE r.name = 'pipeline_nccl' AND c.method IN ('ctda', 'cross_rank') AND c.counted_us > 0
          AND i.matched AND i.wait_us > 0
        GROUP BY ALL""")
    counted = {(w["method"], w["rank"], w["step"]): w["waited_us"] for w in waited}
    assert {key: us for key, us in counted.items() if key[0] == "cross_rank" and us > 0} == {}
    assert counted[("ctda", 0, 4)] == pytest.approx(5241 + 1941 + 1894 + 1866 + 2790 + 4326 + 1603 + 1729, abs=5)

    # step 4's path starts no earlier than rank 1's step-4 window: the time of rank 0's window
    # before it is left unexplained, not taken from rank 1's step 3 a second time
    windows = {(w["rank"], w["step"]): w for w in rows(
        db, "SELECT w.rank, w.step, w.start_us, w.e2e_end_us FROM analysis_windows w JOIN runs r USING (run_id) "
            "WHERE r.name = 'pipeline_nccl'")}
    (slack,) = rows(db, "SELECT slack_before_us FROM cpcr_rows WHERE run = 'pipeline_nccl' "
                        "AND method = 'cross_rank' AND step = 4")
    assert slack["slack_before_us"] >= windows[(1, 4)]["start_us"] - windows[(0, 4)]["start_us"] > 20000
    spans = rows(db, "SELECT c.node_rank, c.step, min(c.counted_start_us) AS first_us, max(c.counted_end_us) AS last_us "
                     "FROM critical_path c JOIN runs r USING (run_id) "
                     "WHERE r.name = 'pipeline_nccl' AND c.method = 'cross_rank' AND c.counted_us > 0 "
                     "GROUP BY ALL ORDER BY c.node_rank, first_us")
    for a, b in zip(spans, spans[1:]):
        if a["node_rank"] == b["node_rank"]:
            assert a["last_us"] <= b["first_us"], (a, b)
