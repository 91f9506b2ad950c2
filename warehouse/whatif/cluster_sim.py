"""Flow-level simulation of collectives' rounds on a described cluster, in SimGrid.

A collective becomes rounds of flows between its ranks' devices (collective_rounds, called by
the parent, warehouse/whatif/cluster.py). The simulation runs as a child process (`python
cluster_sim.py`, JSON on stdin and stdout): SimGrid allows one engine per process, and each
cluster (each value of a sweep) needs its own platform. Each distinct round is simulated
once, its flows started together and sharing the links they cross max-min fairly (SimGrid's
CM02 model with its TCP corrections off, so one flow alone on a path takes exactly latency +
bytes / bandwidth).

Input: {"cluster": {...ClusterSpec fields...}, "devices": N, "rounds": [[[src, dst, bytes], ...], ...]}
Output: {"rounds": [{"us": time, "link": busiest link, "busy_us": its busy time}, ...]}
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import defaultdict

DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"
MISSING = ("SimGrid's Python module is not installed: `apt-get install python3-simgrid` "
           "(Debian's, built for Python 3.11) or `pip install simgrid`")

# the parent's pid: the child asks the kernel to end it when that process ends
PARENT_ENV = "CTDA_CLUSTER_SIM_PARENT"
PR_SET_DEATHSIG = 1


def end_with_parent() -> None:
    """A `whatif` that is killed (SIGTERM, SIGKILL) takes this child with it: Linux sends the
    child SIGKILL when its parent ends. Elsewhere the parent's timeout still bounds the child."""
    parent = os.environ.get(PARENT_ENV)
    if not parent:
        return
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # the parent ended before the request took hold
        sys.exit(1)


def import_simgrid():
    """SimGrid from the environment, else Debian's system package (a venv does not see it)."""
    try:
        import simgrid
        return simgrid
    except ImportError:
        pass
    if DEBIAN_DIST_PACKAGES not in sys.path:
        sys.path.append(DEBIAN_DIST_PACKAGES)
    try:
        import simgrid
        return simgrid
    except ImportError:
        return None


# ---- collectives as rounds of flows --------------------------------------------------------

def collective_kind(name: str) -> str:
    """allreduce, allgather, reducescatter, alltoall, broadcast, ... from either spelling (as
    sql/whatif/20_collectives.sql's wi_collective)."""
    text = name.lower()
    for prefix in ("nccl:", "gloo:", "c10d::"):
        text = text.removeprefix(prefix)
    text = "".join(ch for ch in text if "a" <= ch <= "z")
    return text.removesuffix("base").removesuffix("coalesced").removesuffix("into").removesuffix("tensor")


def collective_rounds(kind: str, size: float, places: list[int], algorithm: str,
                      devices_per_host: int) -> list[tuple[tuple, int]]:
    """The rounds of flows of one collective of `size` bytes between devices `places` (the
    group's ranks' devices, in rank order): [((flow, ...), repeats)], a flow (src, dst, bytes).
    Every round's flows start together; the next round starts when they all ended (the
    algorithms' rounds are identical by structure, so each distinct round is simulated once)."""
    n = len(places)
    if n <= 1:
        return []

    def ring(chunk: float) -> tuple:
        return tuple((places[i], places[(i + 1) % n], chunk) for i in range(n))

    if kind == "allreduce":
        if algorithm == "coherent":      # HCSim: shared memory spares the all-gather half
            return [(ring(size / n), n - 1)]
        if algorithm == "tree":          # recursive halving / doubling: 2 log2 n rounds
            rounds, distance, chunk = [], 1, size / 2
            while distance < n:
                flows = tuple((places[i], places[i ^ distance], chunk) for i in range(n) if i ^ distance < n)
                rounds.append((flows, 2))
                distance, chunk = distance * 2, chunk / 2
            return rounds
        if algorithm == "hierarchical":
            return _hierarchical(size, places, devices_per_host)
        return [(ring(size / n), 2 * (n - 1))]
    if kind in ("allgather", "reducescatter"):
        return [(ring(size / n), n - 1)]
    if kind == "alltoall":               # pairwise exchange: round k sends to rank + k
        steps = range(1, n) if n <= 17 else sorted({round(1 + i * (n - 2) / 15) for i in range(16)})
        weight = (n - 1) / len(steps)
        return [(tuple((places[i], places[(i + k) % n], size / n) for i in range(n)), weight) for k in steps]
    # broadcast, reduce, barrier and the rest: a pipelined chain, n - 1 rounds of size / (n - 1)
    return [(tuple((places[i], places[i + 1], size / (n - 1)) for i in range(n - 1)), n - 1)]


def _hierarchical(size: float, places: list[int], devices_per_host: int) -> list[tuple[tuple, int]]:
    """Ring reduce-scatter inside each host, ring all-reduces between hosts (one per device
    index, in parallel, each over its share), ring all-gather inside each host."""
    hosts: dict[int, list[int]] = {}
    for place in places:
        hosts.setdefault(place // devices_per_host, []).append(place)
    local = min(len(members) for members in hosts.values())
    rounds = []
    if local > 1:
        intra = tuple((m[i], m[(i + 1) % local], size / local) for m in hosts.values() for i in range(local))
        rounds.append((intra, 2 * (local - 1)))
    count = len(hosts)
    if count > 1:
        columns = [[members[j] for members in hosts.values()] for j in range(local)]
        inter = tuple((col[i], col[(i + 1) % count], size / local / count) for col in columns for i in range(count))
        rounds.append((inter, 2 * (count - 1)))
    return rounds



# ---- the simulation (in the child process) ------------------------------------------------

class Platform:
    """Devices placed host-major (device r on host r // devices_per_host), each with a link to
    its host's switch; hosts joined as the topology says. Latencies: intra_host.latency_us is
    device to device in a host (half on each device's link), inter_host.latency_us host to
    host (half on each host's link; all of it on the shared link; leaf uplinks add none)."""

    def __init__(self, sg, spec: dict, devices: int):
        self.sg, self.spec = sg, spec
        self.zone = sg.NetZone.create_full_zone("cluster")
        self.devices = [self.zone.create_host(f"dev{r}", 1e9) for r in range(devices)]
        self.control = self.zone.create_host("control", 1e9)
        self.links: dict[str, object] = {}
        self.bandwidth: dict[str, float] = {}     # link name -> bytes per second
        self.routes: dict[tuple[int, int], list[tuple[str, str]]] = {}

    def _link(self, name: str, gbps: float, latency_us: float, shared: bool = False):
        if name not in self.links:
            if shared:
                link = self.zone.create_link(name, gbps * 1e9 / 8)
            else:
                link = self.zone.create_split_duplex_link(name, gbps * 1e9 / 8)
            link.set_latency(latency_us * 1e-6)
            link.seal()
            self.links[name] = link
            self.bandwidth[name] = gbps * 1e9 / 8
        return self.links[name]

    def path(self, src: int, dst: int) -> list[tuple[str, str]]:
        """(link, direction) crossed from device src to device dst; direction '' for a shared link."""
        spec = self.spec
        per_host = spec["devices_per_host"]
        hs, hd = src // per_host, dst // per_host
        self._link(f"dev{src}", spec["intra_bandwidth_gbps"], spec["intra_latency_us"] / 2)
        self._link(f"dev{dst}", spec["intra_bandwidth_gbps"], spec["intra_latency_us"] / 2)
        hops = [(f"dev{src}", "up")]
        if hs != hd:
            topology = spec["topology"]
            if topology == "shared-link":
                self._link("shared", spec["inter_bandwidth_gbps"], spec["inter_latency_us"], shared=True)
                hops.append(("shared", ""))
            else:
                for host in (hs, hd):
                    self._link(f"host{host}", spec["inter_bandwidth_gbps"], spec["inter_latency_us"] / 2)
                hops.append((f"host{hs}", "up"))
                if topology == "leaf-spine":
                    per_leaf = spec["hosts_per_leaf"]
                    ls, ld = hs // per_leaf, hd // per_leaf
                    if ls != ld:
                        for leaf in (ls, ld):
                            self._link(f"leaf{leaf}", spec["uplink_gbps"], 0.0)
                        hops += [(f"leaf{ls}", "up"), (f"leaf{ld}", "down")]
                hops.append((f"host{hd}", "down"))
        hops.append((f"dev{dst}", "down"))
        return hops

    def add_route(self, src: int, dst: int) -> None:
        if (src, dst) in self.routes:
            return
        hops = self.path(src, dst)
        sg = self.sg
        direction = {"up": sg.LinkInRoute.Direction.UP, "down": sg.LinkInRoute.Direction.DOWN}
        links = [sg.LinkInRoute(self.links[name]) if not way else sg.LinkInRoute(self.links[name], direction[way])
                 for name, way in hops]
        self.zone.add_route(self.devices[src].netpoint, self.devices[dst].netpoint, None, None, links, False)
        self.routes[(src, dst)] = hops

    def busiest(self, flows: list) -> tuple[str, float]:
        """The link (and direction) that carries the most bytes for its bandwidth in a round,
        and how long it is busy: the round's bottleneck when flows start together."""
        load: dict[tuple[str, str], float] = defaultdict(float)
        for src, dst, size in flows:
            for hop in self.routes.get((src, dst), ()):
                load[hop] += size
        if not load:
            return "", 0.0
        (name, way), size = max(load.items(), key=lambda item: item[1] / self.bandwidth[item[0][0]])
        return (f"{name} {way}" if way else name), size / self.bandwidth[name] * 1e6


def simulate(request: dict) -> dict:
    sg = import_simgrid()
    if sg is None:
        return {"error": MISSING}
    engine = sg.Engine(["ctda-cluster", "--cfg=network/model:CM02", "--cfg=network/TCP-gamma:0",
                        "--cfg=network/crosstraffic:0", "--cfg=network/latency-factor:1",
                        "--cfg=network/bandwidth-factor:1", "--log=root.thres:critical"])
    platform = Platform(sg, request["cluster"], int(request["devices"]))
    rounds = [[(int(s), int(d), float(b)) for s, d, b in flows if int(s) != int(d)] for flows in request["rounds"]]
    for flows in rounds:
        for src, dst, _ in flows:
            platform.add_route(src, dst)
    platform.zone.seal()
    results = []

    def run_rounds():
        for flows in rounds:
            began = sg.Engine.clock
            comms = [sg.Comm.sendto_async(platform.devices[s], platform.devices[d], int(round(b)))
                     for s, d, b in flows]
            if comms:
                sg.Comm.wait_all(comms)
            link, busy = platform.busiest(flows)
            results.append({"us": (sg.Engine.clock - began) * 1e6, "link": link, "busy_us": busy})

    sg.Actor.create("rounds", platform.control, run_rounds)
    engine.run()
    return {"rounds": results}


def main() -> None:
    end_with_parent()
    # the answer goes to the original stdout; anything else that writes there (SimGrid's C++
    # side, a module that prints on import) goes to stderr, so the parent reads one document
    answer = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    json.dump(simulate(json.load(sys.stdin)), answer)
    answer.close()


if __name__ == "__main__":
    main()
