"""Trace analyses on the shared real traces, checked against HTA's figures.

Peer figures: HolisticTraceAnalysis 0.5.0 (pandas 2.3.3) in a separate venv
(`python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install 'HolisticTraceAnalysis==0.5.0' 'pandas<3'`),
each trace symlinked as rank-N.json.gz into its own folder, then
`TraceAnalysis(trace_dir=folder)` and get_temporal_breakdown(), get_comm_comp_overlap(),
get_idle_time_breakdown(ranks=[r]) (consecutive_kernel_delay=30), get_cuda_kernel_launch_stats(),
get_queue_length_summary(), get_gpu_kernel_breakdown(), TraceDiff.compare_traces(nccl, ns_resolution,
control_iteration=4, test_iteration=101); step and kernel durations read from the TraceAnalysis
dataframes (include_last_profiler_step=True). The numbers are pasted below; the tests do not need HTA.
See docs/analyses.md for where and why we differ.
"""

from __future__ import annotations

import gzip
import json

import pytest

from ctda_sql.core.connection import connect
from ctda_sql.engine.reports import find_report, run_report
from ctda_sql.shell.entry import main as cli_main

# get_temporal_breakdown: idle_time_pctg, compute_time_pctg, non_compute_time_pctg
HTA_TEMPORAL_PCT = {
    ("nccl", 0): (77.78, 17.26, 4.97),
    ("ns_resolution", 0): (2.63, 96.75, 0.62),
    ("two_ranks", 0): (53.56, 17.71, 28.74),
    ("two_ranks", 1): (54.72, 22.57, 22.72),
}
# get_comm_comp_overlap: comp_comm_overlap_pctg
HTA_OVERLAP_PCT = {("nccl", 0): 14.31, ("two_ranks", 0): 11.81, ("two_ranks", 1): 20.05}
# get_idle_time_breakdown: idle_time (us) per (run, rank, stream) as host_wait, kernel_wait, other
HTA_IDLE_US = {
    ("nccl", 0, 7): (357247, 2155, 0), ("nccl", 0, 40): (381499, 0, 0),
    ("ns_resolution", 0, 7): (1709, 8404, 0),
    ("two_ranks", 0, 7): (213825, 1985, 261740), ("two_ranks", 0, 23): (596037, 70, 34),
    ("two_ranks", 0, 25): (0, 9, 47865), ("two_ranks", 0, 84): (148934, 6, 0),
    ("two_ranks", 1, 7): (156827, 1816, 281064), ("two_ranks", 1, 23): (596313, 100, 0),
    ("two_ranks", 1, 25): (0, 9, 53028), ("two_ranks", 1, 84): (251860, 0, 23247),
}
# get_cuda_kernel_launch_stats (cutoffs 50 / 100 us): launches, sum cpu, sum gpu, short kernels,
# launch-delay outliers
HTA_LAUNCH = {
    ("two_ranks", 0): (602, 5109, 302241, 140, 469),
    ("two_ranks", 1): (577, 4988, 306242, 140, 442),
    ("nccl", 0): (2516, None, None, None, 180),
    ("ns_resolution", 0): (4876, None, None, None, 4713),
}
# get_queue_length_summary: count, mean, max of the queue length per stream
HTA_QUEUE = {
    ("nccl", 0, 7): (5004, 0.81455, 10), ("nccl", 0, 40): (28, 0.5, 1),
    ("ns_resolution", 0, 7): (9752, 812.4135, 1022),
    ("two_ranks", 0, 7): (1052, 23.6198, 76), ("two_ranks", 1, 7): (1002, 24.6657, 75),
}
# get_gpu_kernel_breakdown: sum (us) of the communication kernel per rank
HTA_COMM_KERNEL_US = {("two_ranks", 0): 195327, ("two_ranks", 1): 168027}
# ProfilerStep durations per rank (us) and ampere_sgemm_128x128_tn count, p50, p95, p99 (numpy)
HTA_STEPS_US = {0: (607312, 622928), 1: (607904, 630639)}
HTA_SGEMM = {0: (2, 1333.0, 1337.5, 1337.9), 1: (2, 1354.0, 1358.5, 1358.9)}
# TraceDiff.compare_traces(nccl iteration 4, ns_resolution iteration 101): total counts
HTA_DIFF_COUNTS = (8975, 8601)


@pytest.fixture(scope="module")
def shared_db(shared_traces, tmp_path_factory):
    db = tmp_path_factory.mktemp("analyses") / "shared.duckdb"
    for run, path in (("nccl", "nccl.json.gz"), ("ns_resolution", "ns_resolution.json.gz"),
                      ("two_ranks", "two_ranks")):
        assert cli_main(["--db", str(db), "ingest", str(shared_traces / path), "--run", run]) == 0
    con = connect(db, read_only=True)
    yield con
    con.close()


def rows(con, name: str, **params) -> list[dict]:
    result = run_report(con, find_report(name), {k: str(v) for k, v in params.items()})
    columns = [d[0] for d in result.description]
    return [dict(zip(columns, row)) for row in result.fetchall()]


@pytest.mark.parametrize("hta_rounding", [True, False])
def test_temporal_breakdown_within_one_point_of_hta(shared_db, hta_rounding):
    for row in rows(shared_db, "temporal_breakdown", hta_rounding=hta_rounding):
        if (row["run"], row["rank"]) in HTA_TEMPORAL_PCT:
            ours = (row["idle_pct"], row["compute_pct"], row["non_compute_pct"])
            assert ours == pytest.approx(HTA_TEMPORAL_PCT[row["run"], row["rank"]], abs=1.0)


def test_temporal_breakdown_matches_hta_exactly_with_its_rounding(shared_db):
    [nccl] = rows(shared_db, "temporal_breakdown", run="nccl", hta_rounding="true")
    assert (nccl["idle_us"], nccl["compute_us"], nccl["non_compute_us"], nccl["kernel_us"]) == pytest.approx(
        (338781, 75169, 21636, 435586), abs=0.01)


@pytest.mark.parametrize("hta_rounding", [True, False])
def test_comm_overlap_within_one_point_of_hta(shared_db, hta_rounding):
    found = {(r["run"], r["rank"]): r["overlap_pct"]
             for r in rows(shared_db, "comm_overlap", hta_rounding=hta_rounding)}
    for key, hta_pct in HTA_OVERLAP_PCT.items():
        assert found[key] == pytest.approx(hta_pct, abs=1.0 if not hta_rounding else 0.01)
    assert found["ns_resolution", 0] is None  # no communication kernels: HTA gives NaN


@pytest.mark.parametrize("hta_rounding", [True, False])
def test_idle_time_categories_within_two_points_of_hta(shared_db, hta_rounding):
    ours = {}
    for r in rows(shared_db, "idle_time", hta_rounding=hta_rounding):
        ours.setdefault((r["run"], r["rank"], r["stream"]), {})[r["category"]] = r["idle_us"]
    for key, hta_us in HTA_IDLE_US.items():
        ours_us = [ours[key][c] for c in ("host_wait", "kernel_wait", "other")]
        if key[0] == "ns_resolution" and not hta_rounding:
            # Disagreement, HTA is off: it rounds every start up and end down to whole us
            # (float64 ts), widening each of ~4,900 sub-2 us gaps; exact times give 6.5 ms
            # idle (21 % host_wait) where HTA reports 10.1 ms (17 %).
            assert sum(ours_us) < sum(hta_us) * 0.7 and ours_us[0] / sum(ours_us) > 0.2
            continue
        assert [u / sum(ours_us) for u in ours_us] == pytest.approx([u / sum(hta_us) for u in hta_us], abs=0.02)
        if hta_rounding or key[0] == "two_ranks":  # integer-us traces need no rounding to match
            assert ours_us == pytest.approx(list(hta_us), abs=0.01)


def test_launch_stats_match_hta(shared_db):
    for (run, rank), (count, cpu_us, gpu_us, short, delay_outliers) in HTA_LAUNCH.items():
        launches = rows(shared_db, "launch_stats", run=run, rank=rank, top="NULL")
        assert len(launches) == count
        assert sum(r["launch_delay_outlier"] for r in launches) == delay_outliers
        if cpu_us is not None:
            assert sum(r["cpu_us"] for r in launches) == cpu_us
            assert sum(r["gpu_us"] for r in launches) == gpu_us
            assert sum(r["short_kernel"] for r in launches) == short


def test_queue_length_matches_hta(shared_db):
    found = {(r["run"], r["rank"], r["stream"]): r for r in rows(shared_db, "queue_length")}
    for key, (count, mean, maximum) in HTA_QUEUE.items():
        row = found[key]
        assert (row["change_points"], row["max_queue_length"]) == (count, maximum)
        # equal-time change points are ordered differently (HTA's sort is not stable)
        assert row["mean_queue_length"] == pytest.approx(mean, rel=0.01)
        assert row["blocked_us"] == 0  # HTA: no stream reaches 1024 outstanding launches


def test_kernel_breakdown_matches_hta(shared_db):
    for r in rows(shared_db, "kernel_breakdown", run="two_ranks", top=1):
        if r["kernel_type"] == "communication":
            assert r["total_us"] == HTA_COMM_KERNEL_US["two_ranks", r["rank"]]


def test_kernel_sequences_count_every_root_op(shared_db):
    # HTA 0.5.0's get_frequent_cuda_kernel_sequences raises in CallGraph on nccl and
    # ns_resolution ("Unexpected case") and finds none under aten::linear on two_ranks, so
    # the check is structural: every outermost aten::conv2d with 3+ kernels is counted once.
    seqs = rows(shared_db, "kernel_sequences", run="nccl", operator="aten::conv2d", top=1000)
    roots = shared_db.execute("""
        SELECT count(*) FROM (
            SELECT op.event_id FROM analysis_operator_roots('nccl', 0, 'aten::conv2d') AS op
            JOIN analysis_gpu_ops AS g ON g.run_id = op.run_id AND g.rank = op.rank
             AND g.launch_tid = op.tid AND g.launch_ts_us BETWEEN op.ts_us AND op.end_us
            GROUP BY op.event_id HAVING count(*) >= 3)""").fetchone()[0]
    assert sum(r["occurrences"] for r in seqs) == roots > 0


def test_step_figures_match_hta_step_durations(shared_db):
    by_rank = {r["rank"]: r for r in rows(shared_db, "stragglers", run="two_ranks")}
    for rank, durations in HTA_STEPS_US.items():
        assert by_rank[rank]["value_us"] == pytest.approx(sum(durations) / 2)
    assert [by_rank[r]["z_score"] for r in (0, 1)] == [-1.0, 1.0]  # two ranks: always +-1
    [bucket] = rows(shared_db, "step_trend", run="two_ranks")
    all_steps = [d for durations in HTA_STEPS_US.values() for d in durations]
    assert bucket["step_count"] == 4 and bucket["mean_step_us"] == pytest.approx(sum(all_steps) / 4)


def test_percentiles_match_numpy_on_hta_dataframe(shared_db):
    found = rows(shared_db, "percentiles", run="two_ranks", cat="kernel", name_like="ampere_sgemm_128x128_tn")
    for r in found:
        assert (r["event_count"], r["p50_us"], r["p95_us"], r["p99_us"]) == pytest.approx(HTA_SGEMM[r["rank"]])


def test_run_diff_counts_match_hta_trace_diff(shared_db):
    diff = rows(shared_db, "run_diff", run_a="nccl", run_b="ns_resolution", step_a=4, step_b=101)
    # HTA also counts the gpu_user_annotation copies of CPU annotations as GPU ops (10 in
    # nccl step 4, 1 in ns_resolution step 101); they are not GPU work, so we leave them out.
    gpu_annotations = shared_db.execute("""
        SELECT count(*) FILTER (WHERE r.name = 'nccl'), count(*) FILTER (WHERE r.name = 'ns_resolution')
        FROM events AS e JOIN runs AS r USING (run_id)
        JOIN steps AS s ON s.run_id = e.run_id AND s.rank = e.rank
         AND s.step = CASE r.name WHEN 'nccl' THEN 4 ELSE 101 END
        WHERE e.cat = 'gpu_user_annotation' AND e.ts_us >= s.start_us AND e.ts_us < s.end_us""").fetchone()
    ours = (sum(r["count_a"] for r in diff), sum(r["count_b"] for r in diff))
    assert (ours[0] + gpu_annotations[0], ours[1] + gpu_annotations[1]) == HTA_DIFF_COUNTS


def test_collectives_carry_the_nccl_kernel_metadata(shared_db, shared_traces):
    # no HTA figure: the peer is the raw file, read with json (NCCL kernels with metadata)
    with gzip.open(shared_traces / "nccl.json.gz") as handle:
        events = json.load(handle)["traceEvents"]
    expected = sorted(
        (e["args"]["Collective name"], e["args"]["In msg nelems"], e["dur"]) for e in events
        if e.get("cat") == "kernel" and "Collective name" in e.get("args", {}))
    found = rows(shared_db, "collectives", run="nccl")
    assert sorted((r["collective"], r["in_nelems"], round(r["dur_us"], 3)) for r in found) == expected
    for r in found:
        if r["collective"] == "allreduce":  # group of 2: bus factor 2(n-1)/n = 1
            assert r["busbw_gbps"] == r["algbw_gbps"] == pytest.approx(r["msg_bytes"] / r["dur_us"] / 1e3, abs=1e-3)


def test_every_report_runs_on_the_largest_trace(shared_db):
    # report times at scale are measured by hand: bench/bench_scale.py
    params = {"run_diff": {"run_a": "ns_resolution", "run_b": "nccl"}}
    for name in ("temporal_breakdown", "idle_time", "comm_overlap", "kernel_breakdown", "queue_length",
                 "launch_stats", "kernel_sequences", "stragglers", "percentiles", "step_trend",
                 "run_diff", "collectives"):
        assert isinstance(rows(shared_db, name, **params.get(name, {"run": "ns_resolution"})), list), name
