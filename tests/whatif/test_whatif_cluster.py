"""`whatif --cluster`: a measured job projected onto a described cluster, its collectives
simulated in SimGrid (warehouse/whatif/cluster.py, docs/whatif.md "Projecting onto a cluster").

Validation: with no contention on one path the simulation equals the analytic alpha-beta
model; on a shared link it sees the contention the analytic model cannot; on gloo DDP runs
recorded over a shaped loopback (tests/data/shaped/, scripts/record_shaped_runs.py) it
reproduces each run from its own rate and predicts the others."""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

import numpy as np
import pytest

from ctda_sql.api import Warehouse
from ctda_sql.core.errors import CtdaError
from ctda_sql.whatif.cluster import (
    ClusterSpec,
    check_cluster,
    collective_times,
    load_cluster,
    processor_sharing,
    simgrid_available,
)

from helpers.jobs import shared_link

DATA = Path(__file__).parents[1] / "data"
SHAPED = DATA / "shaped"


@pytest.fixture(scope="module", autouse=True)
def simgrid():
    """CI installs python3-simgrid (.ci/run): there a missing SimGrid fails every test here."""
    if not simgrid_available():
        if os.environ.get("CI"):
            pytest.fail("SimGrid is not installed: `apt-get install python3-simgrid` (.ci/run does)")
        pytest.skip("SimGrid is not installed: `apt-get install python3-simgrid`")


def one_switch(inter_gbps: float = 100.0, inter_latency_us: float = 5.0, intra_latency_us: float = 1.0,
               hosts: int = 16) -> ClusterSpec:
    return check_cluster({"cluster": {"hosts": hosts, "devices_per_host": 1},
                          "intra_host": {"bandwidth_gbps": 1000.0, "latency_us": intra_latency_us},
                          "inter_host": {"topology": "single-switch", "bandwidth_gbps": inter_gbps,
                                         "latency_us": inter_latency_us}})


def alpha_beta_us(kind: str, size: float, n: int, algorithm: str, alpha_us: float, gbps: float) -> float:
    """The analytic model of sql/whatif/20_collectives.sql (steps x latency + bus bytes / bandwidth)."""
    if kind == "allreduce":
        steps = {"ring": 2 * (n - 1), "tree": 2 * math.ceil(math.log2(n)), "coherent": n - 1}[algorithm]
        factor = (n - 1) / n if algorithm == "coherent" else 2 * (n - 1) / n
    elif kind in ("allgather", "reducescatter", "alltoall"):
        steps, factor = n - 1, (n - 1) / n
    else:
        steps, factor = n - 1, 1.0
    return steps * alpha_us + size * factor / (gbps * 1e9 / 8) * 1e6


# ---- the model against the analytic one and against contention ----------------------------------

def test_no_contention_on_one_path_equals_the_alpha_beta_model_within_1_percent():
    spec = one_switch()
    cases = [(kind, size, n, algorithm)
             for kind, algorithms in (("allreduce", ("ring", "tree", "coherent")), ("allgather", ("ring",)),
                                      ("reducescatter", ("ring",)), ("alltoall", ("ring",)),
                                      ("broadcast", ("ring",)))
             for algorithm in algorithms for n in (2, 4, 8, 16) for size in (4e3, 1e6, 64e6)]
    by_algorithm: dict[str, list] = {}
    for kind, size, n, algorithm in cases:
        by_algorithm.setdefault(algorithm, []).append((kind, size, tuple(range(n))))
    checked = 0
    for algorithm, keys in by_algorithm.items():
        times = collective_times(spec, keys, algorithm)
        for kind, size, places in keys:
            # every flow crosses two device links and two host links: the route's latency is
            # intra + inter latency, its bandwidth the host link's
            expected = alpha_beta_us(kind, size, len(places), algorithm, 1.0 + 5.0, 100.0)
            assert times[(kind, size, places)].us == pytest.approx(expected, rel=0.01), (kind, size, places, algorithm)
            checked += 1
    assert checked == len(cases)


def test_a_shared_link_carries_every_flow_so_ranks_slow_each_other():
    """A ring all-reduce of B bytes over 4 ranks puts 6B on a shared link (2B over 2 ranks):
    the analytic model, one flow per rank, sees a quarter of it."""
    size = 8e6
    for n, on_link in ((2, 2), (4, 6)):
        spec = check_cluster({"cluster": {"hosts": n, "devices_per_host": 1},
                              "inter_host": {"topology": "shared-link", "bandwidth_gbps": 0.4}})
        time = collective_times(spec, [("allreduce", size, tuple(range(n)))], "ring")[("allreduce", size, tuple(range(n)))]
        assert time.us == pytest.approx(on_link * size / 0.05e9 * 1e6, rel=0.001)
        assert time.link == "shared"
        assert time.busy_us == pytest.approx(time.us, rel=0.001)
    analytic = alpha_beta_us("allreduce", size, 4, "ring", 0.0, 0.4)
    assert time.us / analytic == pytest.approx(4.0, rel=0.001)


def test_leaf_spine_uplinks_limit_rings_that_cross_leaves():
    spec = check_cluster({"cluster": {"hosts": 8, "devices_per_host": 1},
                          "inter_host": {"topology": "leaf-spine", "bandwidth_gbps": 100.0, "hosts_per_leaf": 4,
                                         "uplink_gbps": 50.0}})
    across = ("allreduce", 1e8, tuple(range(8)))        # the ring leaves each leaf once, at half speed
    within = ("allreduce", 1e8, tuple(range(4)))
    times = collective_times(spec, [across, within], "ring")
    assert times[within].link.startswith("host") or times[within].link.startswith("dev")
    assert times[across].link.startswith("leaf")
    # the cross-leaf flow runs at the uplink's 50 Gbit/s: 14 rounds of 1e8 / 8 bytes
    assert times[across].us == pytest.approx(14 * (1e8 / 8) / (50e9 / 8) * 1e6, rel=0.01)


def test_hierarchical_all_reduce_keeps_most_bytes_inside_the_hosts():
    spec = check_cluster({"cluster": {"hosts": 2, "devices_per_host": 4},
                          "intra_host": {"bandwidth_gbps": 1000.0},
                          "inter_host": {"topology": "single-switch", "bandwidth_gbps": 10.0}})
    key = ("allreduce", 1e8, tuple(range(8)))
    ring = collective_times(spec, [key], "ring")[key].us
    hierarchical = collective_times(spec, [key], "hierarchical")[key].us
    # ring: 14 rounds, each with a B/8 flow on the host link; hierarchical: 2 rounds, each
    # with 4 parallel B/8 flows on it, and the intra-host phases at 100x the bandwidth
    assert ring == pytest.approx(14 * 1e8 / 8 / 1.25e9 * 1e6, rel=0.01)
    assert hierarchical == pytest.approx(2 * 4 * 1e8 / 8 / 1.25e9 * 1e6, rel=0.05)


def test_concurrent_gloo_collectives_share_the_link_so_the_small_one_ends_first():
    """DDP's buckets on gloo run at once (tests/data/shaped/r2-400m-1: the 4.2 MB bucket
    arrives first, the 2.1 MB one 13 ms later; the small one ends first). Served one after
    the other, the big one would end first and the step would wait on the small one."""
    big, small = 169.6, 84.0                       # each alone on the 400 Mbit/s link, ms
    ends = processor_sharing(np.array([0.0, 13.1]), np.array([big, small]))
    assert ends[1] == pytest.approx(13.1 + 2 * small)   # half the link while both run
    assert ends[0] == pytest.approx(big + small)        # the link never idles: all bytes by then
    # a collective that arrives after the others ended has the link to itself
    assert processor_sharing(np.array([0.0, 500.0]), np.array([100.0, 84.0])).tolist() == [100.0, 584.0]


def shared_in_steps(arrival: list[float], work: list[float]) -> list[float]:
    """Processor sharing simulated directly: between two instants where a job arrives or ends,
    every job in progress gets 1 / (jobs in progress) of the server."""
    remaining, end, now = {}, [float("nan")] * len(arrival), min(arrival)
    pending = sorted(range(len(arrival)), key=lambda i: arrival[i])
    while pending or remaining:
        while pending and arrival[pending[0]] <= now:
            job = pending.pop(0)
            remaining[job] = work[job]
        if not remaining:
            now = arrival[pending[0]]
            continue
        share = len(remaining)
        until = min(now + min(remaining.values()) * share, arrival[pending[0]] if pending else float("inf"))
        for job in list(remaining):
            remaining[job] -= (until - now) / share
            if remaining[job] <= 1e-9:
                end[job] = until
                del remaining[job]
        now = until
    return end


@pytest.mark.parametrize("seed", range(20))
def test_processor_sharing_ends_each_job_as_the_direct_simulation_does(seed):
    rng = np.random.default_rng(seed)
    jobs = int(rng.integers(1, 60))
    arrival = np.round(rng.uniform(0, 500, jobs), 1 + seed % 2)
    work = np.round(rng.uniform(0, 80, jobs), 1)
    assert processor_sharing(arrival, work) == pytest.approx(shared_in_steps(arrival.tolist(), work.tolist()),
                                                              rel=1e-9, abs=1e-6)


# ---- the cluster file -----------------------------------------------------------------------

def test_every_bad_key_of_the_cluster_file_gets_its_own_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[cluster]\nhosts = 0\ndevices_per_host = 2\nspeed = 1\n'
                    '[inter_host]\ntopology = "torus"\nbandwidth_gbps = "fast"\n[gpus]\nx = 1\n')
    with pytest.raises(CtdaError) as error:
        load_cluster(path)
    lines = str(error.value).splitlines()
    assert lines[0].endswith("6 bad keys:")
    for expected in ("[gpus]: unknown section", "[cluster] speed: unknown key", "[cluster] hosts: 0 must be",
                     "[inter_host] topology: 'torus' is not one of", "[inter_host] bandwidth_gbps: 'fast' is not a number",
                     "[intra_host] bandwidth_gbps: missing (devices_per_host > 1)"):
        assert sum(line.strip().startswith(expected) for line in lines[1:]) == 1, (expected, lines)
    (tmp_path / "leaf.toml").write_text('[cluster]\nhosts = 4\ndevices_per_host = 1\n'
                                        '[inter_host]\ntopology = "leaf-spine"\nbandwidth_gbps = 100\n')
    with pytest.raises(CtdaError, match="hosts_per_leaf: missing"):
        load_cluster(tmp_path / "leaf.toml")
    with pytest.raises(CtdaError, match="not valid TOML"):
        (tmp_path / "broken.toml").write_text("[cluster\n")
        load_cluster(tmp_path / "broken.toml")


def test_every_bad_key_of_a_host_group_gets_its_own_line():
    groups = [{"first_host": 1, "last_host": "x", "speed": 1}, 7, {"first_host": 1, "last_host": 5, "device_speed": 0.5}]
    with pytest.raises(CtdaError) as error:
        check_cluster({"cluster": {"hosts": 2, "devices_per_host": 1, "groups": groups},
                       "inter_host": {"topology": "single-switch", "bandwidth_gbps": 100}})
    assert str(error.value).splitlines() == [
        "cluster file: 5 bad keys:",
        "  [[cluster.groups]] #1 speed: unknown key (known: first_host, last_host, device_speed)",
        "  [[cluster.groups]] #1 last_host: 'x' is not a number",
        "  [[cluster.groups]] #1 device_speed: missing",
        "  [[cluster.groups]] #2: must be a table",
        "  [[cluster.groups]] #3: hosts 1-5 are not within 0-1"]


def test_a_host_group_may_start_at_host_0():
    """Hosts count from 0 (rank r on host r // devices_per_host): a group of the first hosts
    is `first_host = 0`, and only a negative host is refused."""
    spec = check_cluster({"cluster": {"hosts": 4, "devices_per_host": 1,
                                      "groups": [{"first_host": 0, "last_host": 1, "device_speed": 0.5}]},
                          "inter_host": {"topology": "single-switch", "bandwidth_gbps": 100}})
    assert spec.groups == ((0, 1, 0.5),)
    assert [spec.speed_of(device) for device in range(4)] == [0.5, 0.5, 1.0, 1.0]
    with pytest.raises(CtdaError, match=r"#1 first_host: -1 must be a whole number from 0 to 999,999"):
        check_cluster({"cluster": {"hosts": 4, "devices_per_host": 1,
                                   "groups": [{"first_host": -1, "last_host": 1, "device_speed": 0.5}]},
                       "inter_host": {"topology": "single-switch", "bandwidth_gbps": 100}})


def test_the_command_line_gives_one_error_line_and_a_nonzero_exit(tmp_path, run_cli):
    (tmp_path / "bad.toml").write_text('[cluster]\nhosts = 2\n')
    result = run_cli("whatif", "--cluster", str(tmp_path / "bad.toml"))
    assert result.code != 0
    assert "Traceback" not in result.err
    assert sum(line.startswith("error:") for line in result.err.splitlines()) == 1
    assert "[inter_host] topology: missing" in result.err


# ---- measured truth: gloo DDP over a loopback shaped to R Mbit/s (the shared-link topology) -------

SHAPED_RUNS = ("r2-200m-1", "r2-200m-2", "r2-400m-1", "r2-400m-2", "r2-800m-1", "r2-800m-2",
               "r4-400m-1", "r4-400m-2")
TOLERANCE = 0.10


def median_step_ms(rows) -> float:
    """Mean over the ranks of each rank's median step: (rank, step_us) rows."""
    by_rank: dict[int, list[float]] = {}
    for rank, us in rows:
        by_rank.setdefault(rank, []).append(us)
    return statistics.mean(statistics.median(v) for v in by_rank.values()) / 1000.0


@pytest.fixture(scope="module")
def shaped(tmp_path_factory):
    warehouse = Warehouse(tmp_path_factory.mktemp("shaped") / "w.duckdb")
    for name in SHAPED_RUNS:
        warehouse.ingest(SHAPED / name, run=name)
    warehouse.analyze()
    yield warehouse
    warehouse.close()


def truth(warehouse, ranks: int, rate: int) -> tuple[float, float]:
    """The recorded median step over the repetitions, and their spread (the noise), ms."""
    steps = [median_step_ms(warehouse.con.execute(
        "SELECT w.rank, w.window_us FROM analysis_windows AS w JOIN runs AS r USING (run_id) WHERE r.name = ?",
        [name]).fetchall()) for name in SHAPED_RUNS if name.startswith(f"r{ranks}-{rate}m-")]
    return statistics.mean(steps), max(steps) - min(steps)


def predicted(warehouse, run: str, cluster: dict, world_size: int | None = None) -> float:
    rows = warehouse.whatif(run=run, cluster=cluster, world_size=world_size, name=f"{run} {cluster} {world_size}")
    return median_step_ms([(rank, us) for rank, us in rows.project("rank, predicted_us").fetchall()])


def assert_close(prediction: float, truth_and_noise: tuple[float, float]):
    value, noise = truth_and_noise
    assert abs(prediction - value) <= max(TOLERANCE * value, noise), (prediction, value, noise)


def test_the_cluster_file_at_a_runs_own_rate_reproduces_it(shaped):
    assert_close(predicted(shaped, "r2-400m-1", shared_link(2, 400)), truth(shaped, 2, 400))


@pytest.mark.parametrize("rate", [200, 800])
def test_from_one_rate_the_others_are_predicted(shaped, rate):
    assert_close(predicted(shaped, "r2-400m-1", shared_link(2, rate)), truth(shaped, 2, rate))


def test_four_ranks_on_the_same_link_are_predicted_from_two(shaped):
    """A 4-rank ring puts 6B on the shared link where 2 ranks put 2B; the analytic model
    (one flow per rank, no sharing) cannot see it."""
    assert_close(predicted(shaped, "r2-400m-1", shared_link(4, 400), world_size=4), truth(shaped, 4, 400))


def test_the_limiting_link_is_stored_with_its_description(shaped):
    shaped.whatif(run="r2-200m-1", cluster=shared_link(2, 200), name="links")
    rows = shaped.con.execute("SELECT DISTINCT link, share_of_step > 0.5 FROM whatif_cluster_links "
                              "WHERE scenario = 'links'").fetchall()
    assert rows == [("shared", True)]
    undescribed = shaped.con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'whatif_cluster_links' AND comment IS NULL"
    ).fetchall()
    assert undescribed == []
