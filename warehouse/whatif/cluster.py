"""`whatif --cluster FILE.toml`: project a measured job onto a described cluster.

The job's dependency graph is replayed as by `whatif` (warehouse/whatif/replay.py); each collective
of the replay (from collective_instances: gloo ops and NCCL kernels, with their bytes) becomes
the rounds of flows of its algorithm between the places of its ranks, simulated in SimGrid
(warehouse/whatif/cluster_sim.py: flow-level, max-min sharing of the links), and completes when its
flows end; compute scales by the device's speed. docs/whatif.md ("Projecting onto a
cluster") has the model and its validation."""

from __future__ import annotations

import heapq
import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ctda_sql.core import stages
from ctda_sql.core.errors import CtdaError
from ctda_sql.whatif.changes import Scale, Scenario
from ctda_sql.whatif.cluster_file import ClusterSpec, check_cluster, load_cluster
from ctda_sql.whatif.cluster_sim import collective_kind, collective_rounds

ALLREDUCE = ("ring", "tree", "coherent", "hierarchical")
# compute is every event but communication; the last matching --scale rule wins, so these
# keep collectives (and the waits inside them) at their own time under a device speed
COMMUNICATION_GLOBS = ("nccl*", "NCCL*", "gloo:*", "c10d::*", "record_param_comms", "*all_reduce*",
                       "*allreduce*", "*broadcast*", "*all_gather*", "*allgather*", "*reduce_scatter*",
                       "*barrier*", "*alltoall*", "*all_to_all*")
LINK_COLUMNS = ["run", "rank", "step", "link", "collectives", "busy_us", "share_of_step"]


# ---- simulation ----------------------------------------------------------------------------

def simgrid_available() -> bool:
    """SimGrid importable by the simulation's child process (found without importing it
    here: the module prints its configuration on import)."""
    from importlib.util import find_spec

    from ctda_sql.whatif.cluster_sim import DEBIAN_DIST_PACKAGES
    return find_spec("simgrid") is not None or any(
        Path(DEBIAN_DIST_PACKAGES).glob(f"simgrid.cpython-{sys.version_info.major}{sys.version_info.minor}*.so"))


# the child that runs SimGrid (imports nothing of the package), and how long it may take: a
# round of 16k ranks takes ~15 s, a sweep's value a few
SIM_SCRIPT = Path(__file__).resolve().with_name("cluster_sim.py")
SIM_TIMEOUT_S = 600.0
# SimGrid's full zone keeps a route slot for every pair of devices: 8 bytes x ranks^2 (measured:
# 206 MB at 4,096 ranks, 632 MB at 8,192; 100k ranks would need 80 GB)
MAX_SIMULATED_RANKS = 16_384


def simulation_memory_gib(ranks: int) -> float:
    """The child's memory for a simulated cluster of `ranks` devices, GiB."""
    return (8.0 * ranks * ranks + 64 * 2**20) / 2**30


def check_simulated_ranks(world: int) -> None:
    if world > MAX_SIMULATED_RANKS:
        raise CtdaError(f"a simulated cluster of {world:,} ranks would need about "
                        f"{simulation_memory_gib(world):,.0f} GiB; at most {MAX_SIMULATED_RANKS:,} ranks "
                        f"({simulation_memory_gib(MAX_SIMULATED_RANKS):.1f} GiB)")


def simulate_rounds(spec: ClusterSpec, rounds: list[tuple]) -> list[dict]:
    """Each distinct round's time (µs) and busiest link, simulated in a child process."""
    from ctda_sql.whatif.cluster_sim import MISSING, PARENT_ENV

    if not simgrid_available():
        raise CtdaError(MISSING)
    if not rounds:
        return []
    devices = 1 + max(max(s, d) for flows in rounds for s, d, _ in flows)
    check_simulated_ranks(devices)
    request = {"cluster": spec.as_dict(), "devices": devices, "rounds": [list(flows) for flows in rounds]}
    # the child ends with this process, even when it is killed (cluster_sim.end_with_parent)
    env = {**os.environ, PARENT_ENV: str(os.getpid())}
    try:
        done = subprocess.run([sys.executable, str(SIM_SCRIPT)], input=json.dumps(request), capture_output=True,
                              text=True, timeout=SIM_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise CtdaError(f"the cluster simulation did not finish in {SIM_TIMEOUT_S:g} s "
                        f"({devices:,} ranks, {len(rounds):,} distinct rounds of flows)") from None
    if done.returncode != 0:
        raise CtdaError(f"the cluster simulation failed: {_failure(done)}")
    return _checked_answer(done.stdout, len(rounds))


def _failure(done: subprocess.CompletedProcess) -> str:
    """Why the child failed: the signal that ended it, else its last line on stderr."""
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return f"it was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    last = (done.stderr.strip().splitlines() or [f"it exited with status {done.returncode} and no message"])[-1]
    return last


def _checked_answer(stdout: str, rounds: int) -> list[dict]:
    """The child's rounds: one per round asked, each a finite time, or one error line."""
    try:
        answer = json.loads(stdout)
    except ValueError:
        shown = stdout.strip().splitlines()[0][:80] if stdout.strip() else "nothing"
        raise CtdaError(f"the cluster simulation gave no answer that can be read (its output began: {shown!r})") from None
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        raise CtdaError(answer["error"])
    results = answer.get("rounds") if isinstance(answer, dict) else None
    if not (isinstance(results, list) and len(results) == rounds and all(_round_ok(r) for r in results)):
        raise CtdaError(f"the cluster simulation's answer is not one finite time per round "
                        f"({rounds:,} rounds asked)")
    return results


def _round_ok(result) -> bool:
    return (isinstance(result, dict) and isinstance(result.get("link"), str)
            and all(isinstance(result.get(key), (int, float)) and math.isfinite(result[key]) and result[key] >= 0
                    for key in ("us", "busy_us")))


@dataclass
class CollectiveTime:
    us: float
    link: str          # the link busy longest during the collective
    busy_us: float


def collective_times(spec: ClusterSpec, collectives: list[tuple[str, float, tuple[int, ...]]],
                     algorithm: str) -> dict[tuple, CollectiveTime]:
    """(kind, bytes, group places) -> simulated time; every distinct round simulated once."""
    plans = {key: collective_rounds(key[0], key[1], list(key[2]), algorithm, spec.devices_per_host)
             for key in set(collectives)}
    distinct = list({flows for plan in plans.values() for flows, _ in plan})
    index = {flows: i for i, flows in enumerate(distinct)}
    simulated = simulate_rounds(spec, distinct)
    times = {}
    for key, plan in plans.items():
        busy: dict[str, float] = {}
        total = 0.0
        for flows, repeats in plan:
            result = simulated[index[flows]]
            total += result["us"] * repeats
            if result["link"]:
                busy[result["link"]] = busy.get(result["link"], 0.0) + result["busy_us"] * repeats
        link = max(busy, key=busy.get) if busy else ""
        times[key] = CollectiveTime(total, link, busy.get(link, 0.0))
    return times


def place(spec: ClusterSpec, ranks: list[int]) -> tuple[int, ...]:
    """Host-major placement: rank r is device r (on host r // devices_per_host)."""
    if ranks and max(ranks) >= spec.devices:
        raise CtdaError(f"the cluster has {spec.devices} devices ({spec.hosts} hosts x {spec.devices_per_host}); "
                        f"rank {max(ranks)} has no place")
    return tuple(ranks)


# ---- the replay ----------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class ClusterScenario(Scenario):
    """A scenario whose collectives take the simulated time on the cluster (applied by
    warehouse/whatif/replay.py's replay after the scenario's stages, through `apply`)."""
    cluster: ClusterSpec | None = None
    algorithm: str = "ring"
    projected_world: int | None = None
    transfers: pa.Table | None = field(default=None, repr=False)   # run_id, pg, seq, transfer_us

    def as_json(self) -> str:
        changes = json.loads(super().as_json())
        changes["cluster"] = {**self.cluster.as_dict(), "allreduce": self.algorithm,
                              "world_size": self.projected_world}
        return json.dumps(changes)

    def serializer(self, con):
        """The coupled replay's hook: how the transfers of one process group share its links.
        A NCCL communicator runs one collective at a time on its stream, so collective k's
        transfer starts at the later of its last arrival and the end of k - 1's (FIFO). Gloo
        runs concurrent collectives on its worker threads at once, and their flows (the same
        ranks, the same links) share the bottleneck equally: processor sharing. Measured on
        the shaped runs (tests/data/shaped/r2-400m-1): DDP's 4.2 MB bucket arrives first, the
        2.1 MB one 13 ms later, and the small one ends first (177 ms after, as 2 x its 84 ms
        alone), the big one last (265 ms, its 170 ms plus the small one's 84): served in turn,
        the big one would end first, and the step would wait for the small one's end."""
        return _Serializer.load(con, self.transfers)

    def apply(self, con) -> None:
        """Each coupled collective's transfer becomes its simulated time (sql/whatif/cluster_apply.sql)."""
        con.register("wi_cluster_transfers", self.transfers)
        try:
            stages.run_stage(con, "whatif/cluster_apply.sql", {}, "what-if stage")
        finally:
            con.unregister("wi_cluster_transfers")


class _Serializer:
    """Per chain (a process group of a run), the start of each collective's transfer such
    that start + its simulated time alone is when it ends: FIFO on a NCCL chain, processor
    sharing on a gloo chain (in-flight collectives progress at an equal share of the link)."""

    def __init__(self, chain: np.ndarray, transfer: np.ndarray, shared: np.ndarray | None = None):
        self.transfer = transfer
        self.before = np.zeros_like(transfer)      # S: the chain's transfers before each group
        self.segments = np.split(np.arange(len(chain)), np.flatnonzero(np.diff(chain)) + 1)
        self.shared = [bool(shared[rows].any()) if shared is not None and len(rows) else False
                       for rows in self.segments]
        for rows in self.segments:
            if len(rows):
                self.before[rows] = np.concatenate(([0.0], np.cumsum(transfer[rows])[:-1]))

    @classmethod
    def load(cls, con, transfers: pa.Table) -> "_Serializer":
        con.register("wi_cluster_transfers", transfers)
        try:
            rows = con.execute(
                "WITH kinds AS (SELECT run_id, pg, seq, bool_and(executed_on <> 'nccl_kernel') AS shared "
                "FROM wi_coupled_instances GROUP BY ALL) "
                "SELECT dense_rank() OVER (ORDER BY g.run_id, g.pg) AS chain, "
                "coalesce(t.transfer_us, 0.0) AS transfer_us, coalesce(k.shared, false) AS shared "
                "FROM wi_coupled_groups AS g "
                "LEFT JOIN wi_cluster_transfers AS t USING (run_id, pg, seq) "
                "LEFT JOIN kinds AS k USING (run_id, pg, seq) ORDER BY g.group_index").fetchnumpy()
        finally:
            con.unregister("wi_cluster_transfers")
        return cls(np.asarray(rows["chain"]), np.asarray(rows["transfer_us"], dtype=float),
                   np.asarray(rows["shared"], dtype=bool))

    def __call__(self, arrival: np.ndarray) -> np.ndarray:
        start = arrival.copy()
        for rows, shared in zip(self.segments, self.shared):
            if not len(rows):
                continue
            if shared:
                start[rows] = processor_sharing(arrival[rows], self.transfer[rows]) - self.transfer[rows]
            else:
                s = self.before[rows]
                start[rows] = s + np.maximum.accumulate(arrival[rows] - s)
        return start


def processor_sharing(arrival: np.ndarray, work: np.ndarray) -> np.ndarray:
    """End times of jobs that arrive at `arrival` needing `work` of a server alone, when the
    jobs in progress share it equally (egalitarian processor sharing). In virtual time, which
    runs at 1 / (jobs in progress), every job in progress is served alike: a job ends when
    virtual time reaches its arrival's virtual time + its work, so a heap of those virtual ends
    gives each next end in O(log k) (k jobs in all, however many are in progress at once)."""
    work = np.asarray(work, dtype=float)
    if not np.isfinite(work).all():  # inf - inf is NaN below, and NaN never ends the loop
        raise CtdaError("a collective's simulated transfer is not a finite time")
    end = np.array(arrival, dtype=float)
    order = [int(i) for i in np.argsort(arrival, kind="stable") if np.isfinite(arrival[i])]
    in_progress: list[tuple[float, int]] = []     # (virtual end, job)
    now, virtual, k = -np.inf, 0.0, 0
    while k < len(order) or in_progress:
        if not in_progress:
            now = max(now, float(arrival[order[k]]))
        while k < len(order) and arrival[order[k]] <= now:
            heapq.heappush(in_progress, (virtual + max(float(work[order[k]]), 0.0), order[k]))
            k += 1
        share = len(in_progress)
        first_end = now + (in_progress[0][0] - virtual) * share
        next_arrival = float(arrival[order[k]]) if k < len(order) else np.inf
        if first_end <= next_arrival:
            now, virtual = first_end, in_progress[0][0]
            # every job left with no more than a rounding error of work ends with it
            while in_progress and in_progress[0][0] - virtual <= 1e-9:
                end[heapq.heappop(in_progress)[1]] = now
        else:
            virtual += (next_arrival - now) / share
            now = next_arrival
    return end


def compute_scales(spec: ClusterSpec, measured_ranks: list[int], world: int) -> tuple[Scale, ...]:
    """--scale rules that run every measured rank's compute at its device's speed. In a
    projection to more ranks than were measured, rank r stands for ranks r, r + m, r + 2m, ...
    (m measured ranks); it runs at the slowest of their speeds, since a collective waits for
    its last rank."""
    count = len(measured_ranks)
    by_speed: dict[float, list[int]] = {}
    for i, rank in enumerate(measured_ranks):
        copies = range(i, max(world, count), count)
        by_speed.setdefault(min(spec.speed_of(r) for r in copies), []).append(rank)
    rules: list[Scale] = []
    for speed, ranks in sorted(by_speed.items()):
        if speed != 1.0:
            subset = None if len(ranks) == count else tuple(ranks)
            rules.append(Scale("*", 1.0 / speed, None, subset))
            rules += [Scale(glob, 1.0, None, subset) for glob in COMMUNICATION_GLOBS]
    return tuple(rules)


# --no-coupling is refused rather than applied to each rank alone: the cluster's model is the
# ranks replayed together. A collective's flows start at its last rank's arrival, and
# concurrent collectives share a link (processor sharing on a gloo chain, FIFO on a NCCL one);
# a rank replayed alone has neither its peers' arrivals nor their flows, and keeps its measured
# waiting, which on a slower network would be wrong by the very time the cluster adds.
NO_COUPLING = ("--cluster replays the ranks together (a collective's flows start when its last rank "
               "arrives and share the links with the others): leave out --no-coupling")


def cluster_scenario(con, spec: ClusterSpec, run: str | None = None, world_size: int | None = None,
                     allreduce: str | None = None, scales: tuple[Scale, ...] = ()) -> ClusterScenario:
    """The scenario of a projection onto `spec`: every collective of the run with its simulated
    time (SimGrid runs here, before any replay), and compute at the devices' speeds."""
    from ctda_sql.engine.analyze import run_id_or_all

    algorithm = allreduce or "ring"
    if algorithm not in ALLREDUCE:
        raise CtdaError(f"--allreduce must be one of {', '.join(ALLREDUCE)}")
    if world_size is not None:
        if isinstance(world_size, bool) or not isinstance(world_size, int):
            raise CtdaError(f"--world-size must be a whole number, not {world_size!r}")
        if world_size < 2:
            raise CtdaError(f"--world-size {world_size} with --cluster: a collective of one rank crosses no "
                            "network; give 2 or more")
        check_simulated_ranks(world_size)
    run_id = run_id_or_all(con, run)
    instances = con.execute(
        "SELECT run_id, pg, seq, any_value(name), max(bytes), max(len(group_ranks)), any_value(group_ranks) "
        "FROM collective_instances WHERE ($run_id IS NULL OR run_id = $run_id) AND bytes IS NOT NULL "
        "AND name <> 'wait' "
        "GROUP BY run_id, pg, seq", {"run_id": run_id}).fetchall()
    measured_ranks = [r for (r,) in con.execute(
        "SELECT DISTINCT rank FROM analysis_windows WHERE $run_id IS NULL OR run_id = $run_id ORDER BY rank",
        {"run_id": run_id}).fetchall()]
    if not measured_ranks:
        raise CtdaError("no analysed steps match; run `ctda-sql analyze` first (method ctda)")
    if not instances:
        raise CtdaError("no collectives with their sizes in collective_instances: run `ctda-sql analyze` "
                        "(method cross_rank, part of the default) on a run with collectives")
    world = world_size or max(max(r[5] or 1 for r in instances), len(measured_ranks))
    if world == 1:
        raise CtdaError("the run's collectives name one rank: give --world-size N (2 or more) to place its "
                        "ranks on the cluster")
    check_simulated_ranks(world)
    place(spec, [world - 1])
    keys = {}
    for run_id_, pg, seq, cname, size, group_size, group_ranks in instances:
        members = list(range(world)) if world_size else sorted(group_ranks or range(group_size or 1))
        keys[(run_id_, pg, seq)] = (collective_kind(cname), float(size), place(spec, members))
    times = collective_times(spec, list(keys.values()), algorithm)
    transfer_us = [times[v].us for v in keys.values()]
    if not all(math.isfinite(us) for us in transfer_us):  # the file's bounds keep them finite
        raise CtdaError("a collective's simulated time on the cluster is not a finite number")
    transfers = pa.table({
        "run_id": pa.array([k[0] for k in keys], pa.int32()), "pg": [str(k[1]) for k in keys],
        "seq": pa.array([k[2] for k in keys], pa.int64()),
        "transfer_us": transfer_us, "link": [times[v].link for v in keys.values()],
        "busy_us": [times[v].busy_us for v in keys.values()]})
    return ClusterScenario(scales=tuple(scales) + compute_scales(spec, measured_ranks, world),
                           cluster=spec, algorithm=algorithm, projected_world=world, transfers=transfers)


def whatif_cluster(con, spec: ClusterSpec, run: str | None = None, rank: int | None = None,
                   step: int | None = None, world_size: int | None = None, allreduce: str | None = None,
                   scales: tuple[Scale, ...] = (), name: str | None = None, top: int = 10,
                   coupled: bool = True):
    """Replay the selected steps with every collective taking its simulated time on `spec`,
    and compute at the devices' speeds; stores whatif_steps / whatif_path rows and the links
    that limited the collectives (whatif_cluster_links). Returns (WhatIfResult, link rows)."""
    if not coupled:
        raise CtdaError(NO_COUPLING)
    scenario = cluster_scenario(con, spec, run=run, world_size=world_size, allreduce=allreduce, scales=scales)
    return whatif_clusters(con, [(name or scenario.as_json(), scenario)], run=run, rank=rank, step=step,
                           top=top)[0]


def whatif_clusters(con, scenarios: list[tuple[str, ClusterScenario]], run: str | None = None,
                    rank: int | None = None, step: int | None = None, top: int = 10, coupled: bool = True,
                    progress=lambda: None) -> list[tuple]:
    """Replay several projections of the same steps (a sweep) in one transaction: each one's
    whatif_steps, whatif_path and whatif_cluster_links rows are stored all together or not at
    all. Returns [(WhatIfResult, link rows)]."""
    from ctda_sql.whatif.replay import whatif_many

    if not coupled:
        raise CtdaError(NO_COUPLING)
    links: list[list[tuple]] = []

    def store_links() -> None:
        # whatif_many calls this inside its transaction, after each scenario's steps are stored
        # (the links' share_of_step reads them): the links commit or roll back with them
        name, scenario = scenarios[len(links)]
        links.append(_persist_links(con, name, scenario.transfers))
        progress()

    results = whatif_many(con, scenarios, run=run, rank=rank, step=step, top=top, coupled=True,
                          progress=store_links)
    if len(links) != len(results):  # whatif_many no longer reports each scenario: nothing is linked
        raise CtdaError("the what-if stored no links for its scenarios")
    return list(zip(results, links))


def _persist_links(con, scenario: str, transfers: pa.Table) -> list[tuple]:
    con.register("wi_cluster_transfers", transfers)
    try:
        stages.run_stage(con, "whatif/cluster_links.sql", {"scenario": scenario}, "what-if stage")
        return con.execute("SELECT * EXCLUDE (run_id) FROM wi_cluster_link_rows ORDER BY ALL").fetchall()
    finally:
        con.unregister("wi_cluster_transfers")


# ---- the Python API: Warehouse.whatif(cluster=...) --------------------------------------------

def cluster_spec(cluster) -> ClusterSpec:
    """A ClusterSpec from a spec, a path to a TOML file, or the file's contents as a dict."""
    if isinstance(cluster, ClusterSpec):
        return cluster
    if isinstance(cluster, dict):
        return check_cluster(cluster, "cluster")
    if isinstance(cluster, (str, os.PathLike)):
        if not str(cluster).strip():
            raise CtdaError("cluster: give a cluster file's path (FILE.toml), not an empty name")
        return load_cluster(cluster)
    raise CtdaError(f"cluster must be a path to a TOML cluster file, its contents as a dict or a ClusterSpec, "
                    f"not {type(cluster).__name__} {cluster!r}"[:200])


def whatif_on_cluster(con, cluster, scenario: Scenario, run=None, rank=None, step=None, name=None,
                      coupled: bool = True) -> str:
    """Warehouse.whatif(cluster=...): the projection's rows go to whatif_steps under the
    returned scenario name. `cluster`: a TOML path, its contents as a dict, or a ClusterSpec."""
    if scenario.bandwidth_scale != 1.0 or scenario.latency_us is not None:
        raise CtdaError("a cluster describes the network: leave out comm_bandwidth_scale and comm_latency_us")
    spec = cluster_spec(cluster)
    result_name = name or f"cluster {json.dumps(spec.as_dict())}"
    whatif_cluster(con, spec, run=run, rank=rank, step=step,
                   world_size=scenario.world_size, allreduce=scenario.allreduce, scales=scenario.scales,
                   name=result_name, coupled=coupled)
    return result_name
