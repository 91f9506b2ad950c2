"""The engine on real CUDA training traces recorded on an H100 (scripts/record_cuda_traces.py,
kept in tests/data/cuda): `loss.item()` every step with a side copy stream, DDP over NCCL,
and a CUDA graph; each recorded as users do (no cuda_sync events) and with
`enable_cuda_sync_events`, whose recorded syncs are the truth the inferred edges must match.
Beside them, ddp_transformer (scripts/record_cuda_bench_trace.py, 243,979 events, 18 steps):
a launch-bound Transformer under DDP, forward on the main thread, backward on autograd's."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctda_sql.core.connection import connect
from ctda_sql.engine.analyze import analyze
from ctda_sql.ingest.load import ingest
from ctda_sql.whatif.replay import whatif

from invariants import (
    BLOCKING_SHARE_SQL,
    MISSED_HANDOFF_SQL,
    broken_invariants,
    create_cpcr_rows,
    hotspots_kept,
    top_names,
)

CUDA_TRACES = Path(__file__).parents[1] / "data" / "cuda"
GPU_BOUND = ("item_sync_big", "ddp_nccl_big", "cuda_graph")


@pytest.fixture(scope="module")
def cuda_warehouse(tmp_path_factory):
    con = connect(tmp_path_factory.mktemp("cuda") / "cuda.duckdb")
    for path in sorted(CUDA_TRACES.glob("*.json.gz")):
        ingest(con, [path], run_name=path.name.removesuffix(".json.gz"), show_progress=False)
    analyze(con, show_progress=False)
    create_cpcr_rows(con)
    yield con
    con.close()


def test_every_step_keeps_the_invariants(cuda_warehouse):
    assert broken_invariants(cuda_warehouse) == {}


def test_no_device_node_waits_1ms_for_a_hand_off_that_ended_within_100us(cuda_warehouse):
    assert cuda_warehouse.execute(MISSED_HANDOFF_SQL).fetchall() == []


def test_top_hotspots_are_stable_as_the_hand_off_tolerance_goes_from_15_to_100us(cuda_warehouse):
    assert hotspots_kept(cuda_warehouse) == {}


def test_syncs_and_blocking_copies_never_count_as_cpu_work(cuda_warehouse):
    shares = dict(cuda_warehouse.execute(BLOCKING_SHARE_SQL).fetchall())
    assert len(shares) == len(list(CUDA_TRACES.glob("*.json.gz")))
    assert {run: share for run, share in shares.items() if (share or 0) > 0.05} == {}


@pytest.mark.parametrize("run", GPU_BOUND)
def test_gpu_bound_steps_put_kernels_at_the_top(cuda_warehouse, run):
    """`loss.item()` waits for the whole step's kernels: those kernels, not the copy or the
    cudaStreamSynchronize that waited for them, are what decides step time."""
    top = top_names(cuda_warehouse, top=3)[run]
    categories = dict(cuda_warehouse.execute(
        "SELECT DISTINCT p.name, p.cat FROM path_events p JOIN runs r USING (run_id) WHERE r.name = ?",
        [run]).fetchall())
    assert [categories[name] for name in top] == ["kernel"] * 3


@pytest.mark.parametrize("run", GPU_BOUND)
def test_gpu_bound_steps_are_covered(cuda_warehouse, run):
    cpcrs = [row[0] for row in cuda_warehouse.execute(
        "SELECT cpcr FROM cpcr_rows WHERE run = ? AND method = 'ctda'", [run]).fetchall()]
    assert len(cpcrs) == 4 and min(cpcrs) > 0.85


@pytest.mark.parametrize("scenario", ["item_sync", "ddp_nccl", "cuda_graph", "item_sync_big", "ddp_nccl_big"])
def test_inferred_syncs_find_what_recorded_syncs_say(cuda_warehouse, scenario):
    """The same job recorded with and without cuda_sync events gets the same sync edges per
    step and the same top hotspots: the inference stands in for the missing records."""
    edges = dict(cuda_warehouse.execute(
        "SELECT r.name, count(*) FROM edges e JOIN runs r USING (run_id) "
        "WHERE e.method = 'ctda' AND e.type = 'sync' AND r.name IN (?, ?) GROUP BY r.name",
        [scenario, scenario + "_syncevents"]).fetchall())
    assert edges[scenario] == edges[scenario + "_syncevents"] > 0
    tops = top_names(cuda_warehouse, top=5)
    assert len(set(tops[scenario]) & set(tops[scenario + "_syncevents"])) >= 4


def test_every_kernel_of_the_cuda_graph_is_on_the_path(cuda_warehouse):
    missing = cuda_warehouse.execute(
        "SELECT count(*) FROM events g JOIN runs r USING (run_id) "
        "JOIN events call ON call.run_id = g.run_id AND call.correlation = g.correlation "
        "  AND call.name = 'cudaGraphLaunch' "
        "JOIN analysis_windows w ON w.run_id = g.run_id AND g.ts_us >= w.start_us AND g.end_us <= w.e2e_end_us "
        "WHERE r.name = 'cuda_graph' AND g.cat = 'kernel' AND NOT EXISTS ("
        "  SELECT 1 FROM path_events p WHERE p.run_id = g.run_id AND p.event_id = g.event_id "
        "  AND p.method = 'ctda')").fetchone()[0]
    assert missing == 0


def test_every_step_of_the_transformer_runs_through_both_threads(cuda_warehouse):
    """Forward runs on the main thread, backward on the autograd thread: each step's path
    hands over between them (cross_thread edges), so both threads' CPU nodes are on it."""
    threads = cuda_warehouse.execute("""
        SELECT cp.step, count(DISTINCT n.tid)
        FROM critical_path AS cp
        JOIN nodes AS n USING (run_id, rank, step, method, node_id)
        JOIN runs AS r USING (run_id)
        WHERE r.name = 'ddp_transformer' AND cp.method = 'ctda' AND n.kind = 'cpu'
        GROUP BY cp.step""").fetchall()
    assert len(threads) == 18 and {count for _, count in threads} == {2}


def test_the_unchanged_whatif_replay_reproduces_every_real_cuda_step(cuda_warehouse):
    """The replay chains each rank's windows and carries GPU streams across them; on real
    traces (work in flight across step boundaries, syncs, NCCL, CUDA graphs) it must still
    reproduce every measured step."""
    runs = [name for (name,) in cuda_warehouse.execute("SELECT name FROM runs ORDER BY name").fetchall()]
    off = {}
    for run in runs:
        for _run, _rank, step, measured, replayed, *_ in whatif(cuda_warehouse, run=run, persist=False).steps:
            if abs(replayed - measured) > 0.01 * measured:
                off[(run, step)] = (measured, replayed)
    assert len(runs) == len(list(CUDA_TRACES.glob("*.json.gz"))) and off == {}
