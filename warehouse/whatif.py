"""What-if replay: predict every step's time under a change by replaying its dependency graph.

The SQL stages in sql/whatif/ prepare, set-based, each node's duration under the scenario
and each edge's measured slack; the forward pass here walks the nodes of all windows at once
in dependency order (one numpy step per position in the window's node order)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import duckdb
import numpy as np
import pyarrow as pa

from . import sqlfiles
from .analyze import _run_id
from .errors import CtdaError
from .transaction import transaction
from .whatif_changes import Scale, Scenario  # noqa: F401  (part of this module's API)

# once per what-if (the windows and their graph), then once per replayed scenario
SCOPE = ("10_scope.sql", "15_graph.sql")
PREPARE = ("05_rules.sql", "20_collectives.sql", "30_work_factors.sql", "40_graph.sql", "45_coupling.sql")
# a CPU thread of the graph idle this long waited for another thread when that thread's work
# ended at most HANDOFF_US before it resumed (hand-offs take 0.1-3 ms, up to 4.7 ms measured
# under contention: a woken thread may wait a GIL switch interval, 5 ms; docs/whatif.md)
MIN_WAIT_US = 500.0
HANDOFF_US = 5000.0
# a CPU thread blocked in a collective's wait resumes within this long of its end (as the
# cross-rank path, warehouse/crossrank.py)
RESUME_US = 1000.0
# replayed instants closer than this are the same (the coupled solve settles to 1e-6 µs)
TIME_ATOL_US = 1e-5
# a launch call this much slower than its name's median waited for a launch-queue slot; a
# window whose launches waited this share of its length kept the GPU's pace
QUEUE_WAIT_US = 100.0
QUEUE_SHARE = 0.1
STEP_COLUMNS = ["run", "rank", "step", "measured_us", "replay_us", "predicted_us", "speedup"]
HOTSPOT_COLUMNS = ["kind", "label", "nodes", "measured_us", "predicted_us"]


@dataclass
class WhatIfResult:
    steps: list[tuple] = field(default_factory=list)      # STEP_COLUMNS
    hotspots: list[tuple] = field(default_factory=list)   # HOTSPOT_COLUMNS


def event_categories(con) -> set[str]:
    return {row[0] for row in con.execute("SELECT DISTINCT cat FROM events WHERE cat IS NOT NULL").fetchall()}


def whatif(con: duckdb.DuckDBPyConnection, run: str | None = None, rank: int | None = None,
           step: int | None = None, scenario: Scenario = Scenario(), name: str | None = None,
           persist: bool = True, top: int = 10, coupled: bool = True) -> WhatIfResult:
    """Replay the selected windows unchanged and under `scenario`; with `persist`, store the
    rows in whatif_steps and whatif_path under scenario `name` (default: the changes).
    With `coupled`, the ranks of a multi-rank run are replayed together (every rank, even when
    `rank` picks the rows to report): a matched collective completes at its last replayed
    arrival plus its transfer time; without, each rank keeps its measured waiting."""
    return whatif_many(con, [(name, scenario)], run=run, rank=rank, step=step, persist=persist,
                       top=top, coupled=coupled)[0]


def whatif_many(con: duckdb.DuckDBPyConnection, scenarios: list[tuple[str | None, Scenario]],
                run: str | None = None, rank: int | None = None, step: int | None = None,
                persist: bool = True, top: int = 10, coupled: bool = True,
                progress: Callable[[], None] = lambda: None) -> list[WhatIfResult]:
    """whatif() for several scenarios of the same windows (a --sweep): every scenario is
    checked before any runs, the windows are selected and replayed unchanged once, and all
    of it is one transaction, so a failure or Ctrl-C part-way stores nothing. `progress` is
    called after each scenario."""
    if top < 0:
        raise CtdaError("--top must be 0 or more")
    for _, scenario in scenarios:
        scenario.validate()
    params = {"run_id": _run_id(con, run), "rank": rank, "step": step,
              "all_ranks": bool(coupled and rank is not None), "coupled": bool(coupled),
              "queue_wait_us": QUEUE_WAIT_US, "queue_share": QUEUE_SHARE}
    results = []
    # the scenarios' stages write comm_model too: one transaction keeps all or nothing
    with transaction(con):
        for stage in SCOPE:
            _execute(con, f"whatif/{stage}", params)
        for _, scenario in scenarios:
            _check_scope(con, params, scenario)
        baseline = _replay(con, params, Scenario())
        if not baseline.windows:
            raise CtdaError("no analysed steps match; run `ctda-sql analyze` first (method ctda)")
        names = dict(con.execute("SELECT run_id, name FROM runs").fetchall())
        for name, scenario in scenarios:
            predicted = _replay(con, params, scenario) if scenario != Scenario() else baseline
            steps = _step_rows(con, baseline, predicted)
            path = _path_rows(predicted)
            if persist:
                _persist(con, name or scenario.as_json(), scenario.as_json(), steps, path)
            results.append(WhatIfResult(steps=[(names[r[0]], *r[1:]) for r in steps],
                                        hotspots=_hotspots(path, top)))
            progress()
    return results


def _check_scope(con, params: dict, scenario: Scenario) -> None:
    """Name the ranks and steps that exist when --rank, --step or a rank-scoped --scale asks
    for one that does not (rather than "run analyze first", which would not help)."""
    analysed = con.execute("SELECT DISTINCT rank, step FROM analysis_windows WHERE $run_id IS NULL OR run_id = $run_id",
                           {"run_id": params["run_id"]}).fetchall()
    if not analysed:
        return  # nothing analysed: the caller says to run analyze
    ranks = {rank for rank, _ in analysed}
    if params["rank"] is not None and params["rank"] not in ranks:
        raise CtdaError(f"no analysed rank {params['rank']}; ranks: {_ranges(ranks)}")
    steps = {step for rank, step in analysed if params["rank"] is None or rank == params["rank"]}
    if params["step"] is not None and params["step"] not in steps:
        of_rank = f" of rank {params['rank']}" if params["rank"] is not None else ""
        raise CtdaError(f"no analysed step {params['step']}{of_rank}; steps: {_ranges(steps)}")
    scenario.check_ranks(ranks)


def _ranges(numbers: set[int]) -> str:
    """{0, 1, 2, 5} -> '0-2, 5' (a run may have thousands of steps)."""
    ordered, parts = sorted(numbers), []
    first = previous = ordered[0]
    for n in ordered[1:] + [None]:
        if n is not None and n == previous + 1:
            previous = n
            continue
        parts.append(f"{first}-{previous}" if previous - first >= 2 else
                     ", ".join(map(str, range(first, previous + 1))))
        first = previous = n
    return ", ".join(parts)


# ---- the replay -------------------------------------------------------------------------

@dataclass
class _Replay:
    windows: dict           # window_index -> (run_id, rank, step, measured_us, predicted_us)
    nodes: dict             # column -> array, ordered by (window, seq)
    start: np.ndarray
    end: np.ndarray
    paths: dict             # window_index -> node rows (global index) earliest first
    row_rank: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # each row's rank
    row_step: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # and step


def _prepare(con, params: dict, scenario: Scenario) -> None:
    values = {
        **params,
        "rule_names": [s.name_glob for s in scenario.scales],
        "rule_categories": [s.category_glob for s in scenario.scales],
        "rule_factors": [float(s.factor) for s in scenario.scales],
        "rule_ranks": [",".join(map(str, s.ranks)) if s.ranks is not None else "" for s in scenario.scales],
        "resume_us": RESUME_US,
        "network_changed": scenario.network_changed, "bandwidth_scale": float(scenario.bandwidth_scale),
        "latency_us": scenario.latency_us, "algorithm": scenario.allreduce, "world_size": scenario.world_size,
        "min_wait_us": MIN_WAIT_US, "handoff_us": HANDOFF_US,
    }
    for stage in PREPARE:
        _execute(con, f"whatif/{stage}", values)


@lru_cache(maxsize=None)
def _statements(name: str) -> tuple[tuple[str, frozenset], ...]:
    """The statements of a stage and their parameters (parsed once per process)."""
    return tuple((st, frozenset(names)) for st, names in sqlfiles.parameterized_statements(sqlfiles.load(name)))


def _execute(con, name: str, values: dict) -> None:
    for statement, names in _statements(name):
        try:
            con.execute(statement, {key: values[key] for key in names}) if names else con.execute(statement)
        except duckdb.Error as exc:
            raise CtdaError(f"what-if stage {name} failed: {str(exc).strip().splitlines()[0]}") from exc


def _replay(con, params: dict, scenario: Scenario) -> _Replay:
    _prepare(con, params, scenario)
    if hasattr(scenario, "apply"):  # whatif --cluster: collectives take their simulated time
        scenario.apply(con)
    nodes = con.execute("SELECT * FROM wi_replay_nodes ORDER BY window_index, seq").fetchnumpy()
    edges = con.execute("SELECT * FROM wi_replay_edges ORDER BY dst_seq").fetchnumpy()
    windows = con.execute("SELECT * FROM wi_replay_windows ORDER BY window_index").fetchnumpy()
    if len(windows["window_index"]) == 0:
        return _Replay({}, nodes, np.empty(0), np.empty(0), {})
    first = _first_rows(nodes["window_index"], len(windows["window_index"]))
    graph = _Graph(nodes, edges, windows, first)
    chain = _WindowChain(con.execute("SELECT * FROM wi_window_origins ORDER BY window_index").fetchnumpy())
    carry = _StreamCarry.build(graph, nodes, chain)
    coupling = _Coupling.load(con, graph, chain)
    if coupling is not None and hasattr(scenario, "serializer"):  # whatif --cluster
        coupling.serialize = scenario.serializer(con)
    if coupling is not None:
        start = coupling.solve(carry)
    elif carry is not None:
        start = carry.settle()
    else:
        start = graph.forward_pass()
    source = graph.best_source(start)
    if coupling is not None:  # where a collective held a node, the path follows the last arrival
        source = np.where(source < 0, coupling.held_by(start), source)
    return _finish(graph, windows, nodes, start, source)


def _first_rows(window_of_node: np.ndarray, window_count: int) -> np.ndarray:
    """Row of each window's first node (nodes are ordered by window, then seq)."""
    return np.searchsorted(np.asarray(window_of_node), np.arange(window_count))


def _column(table: dict, name: str, fill=np.nan) -> np.ndarray:
    values = table[name]
    return np.ma.filled(values.astype(float), fill) if np.ma.isMaskedArray(values) else np.asarray(values, dtype=float)


class _Graph:
    """Every window's nodes and edges as flat arrays (global rows: window's first row + seq)."""

    def __init__(self, nodes: dict, edges: dict, windows: dict, first: np.ndarray):
        self.first, self.count = first, len(nodes["seq"])
        self.duration = np.asarray(nodes["duration_us"], dtype=float).copy()
        self.measured_start = np.asarray(nodes["start_us"], dtype=float)
        self.measured_end = np.asarray(nodes["end_us"], dtype=float)
        self.initial = np.where(nodes["has_predecessor"], -np.inf, np.asarray(nodes["lead_us"], dtype=float))
        window_first = first[np.asarray(edges["window_index"], dtype=np.int64)]
        self.src = window_first + np.asarray(edges["src_seq"], dtype=np.int64)
        self.dst = window_first + np.asarray(edges["dst_seq"], dtype=np.int64)
        self.slack = np.asarray(edges["slack_us"], dtype=float)
        self.delay = np.asarray(edges["offset_us"], dtype=float) + self.slack
        dst_seq = np.asarray(edges["dst_seq"], dtype=np.int64)
        self.chunks = np.split(np.arange(len(dst_seq)), np.flatnonzero(np.diff(dst_seq)) + 1)
        self.gpu = (nodes["kind"] == "gpu") & ~np.asarray(nodes["carry_in"], dtype=bool)
        self.window_count = len(windows["window_index"])
        self.reported = np.asarray(windows["reported"], dtype=bool)
        tail = _column(windows, "tail_seq")
        self.has_tail = ~np.isnan(tail)
        self.tail_row = np.where(self.has_tail, first + np.nan_to_num(tail).astype(np.int64), 0)
        self.tail_us = np.nan_to_num(_column(windows, "tail_us"))
        self.cpu_end_us = np.asarray(windows["cpu_end_us"], dtype=float)
        # a window that waited for launch-queue slots keeps the GPU's pace (40_graph.sql)
        self.gated_us = _column(windows, "gated_us", -np.inf)
        self.device_ends = np.asarray(windows["device_ends_step"], dtype=bool)
        self.window_of_row = np.asarray(nodes["window_index"], dtype=np.int64)

    def forward_pass(self, floor: np.ndarray | None = None, initial: np.ndarray | None = None) -> np.ndarray:
        """Start of every node: the latest of what its incoming edges allow (source start +
        offset + kept slack) and its floor; a node without predecessors keeps its lead from the
        window start (or `initial`'s value). Edges point forward in node order, so handling all
        windows' k-th nodes together is exact."""
        start = self.initial if initial is None else initial
        start = (start if floor is None else np.maximum(start, floor)).copy()
        src, dst, delay = self.src, self.dst, self.delay
        for chunk in self.chunks:
            if len(chunk):
                np.maximum.at(start, dst[chunk], start[src[chunk]] + delay[chunk])
        return start

    def arrivals(self, start: np.ndarray) -> np.ndarray:
        """Where each node would start without its floor."""
        arrive = self.initial.copy()
        np.maximum.at(arrive, self.dst, start[self.src] + self.delay)
        return arrive

    def best_source(self, start: np.ndarray) -> np.ndarray:
        allowed = start[self.src] + self.delay
        best = np.full(self.count, -1, dtype=np.int64)
        binding = np.isclose(allowed, start[self.dst], rtol=0, atol=1e-6)
        best[self.dst[binding]] = self.src[binding]
        return best

    def window_lengths(self, start: np.ndarray) -> np.ndarray:
        return self._lengths(start + self.duration)[0]

    def _lengths(self, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each window's replayed length, and whether its last GPU node ends it. A step ends
        where the next one starts (its CPU tail, floored by the launch-queue gate); only a
        window that runs on to its device work ends at its last GPU node when later."""
        # a window without nodes (a CPU-only step the engine drew nothing for) has no tail row
        tail_end = end[self.tail_row] if end.size else np.zeros(self.window_count)
        cpu_end = np.fmax(np.where(self.has_tail, tail_end + self.tail_us, self.cpu_end_us), self.gated_us)
        gpu_end = np.full(self.window_count, -np.inf)
        rows = np.flatnonzero(self.gpu)
        np.maximum.at(gpu_end, self.window_of_row[rows], end[rows])
        gpu_later = self.device_ends & (gpu_end > cpu_end)
        return np.where(gpu_later, gpu_end, cpu_end), gpu_later

    def window_ends(self, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each window's replayed length and the row its path backtracks from (-1: none)."""
        end = start + self.duration
        lengths, gpu_later = self._lengths(end)
        # each window's GPU node that ends last (the first such row on a tie)
        rows = np.flatnonzero(self.gpu)
        rows = rows[np.lexsort((rows, -end[rows], self.window_of_row[rows]))]
        windows, first = np.unique(self.window_of_row[rows], return_index=True)
        last_gpu = np.full(self.window_count, -1)
        last_gpu[windows] = rows[first]
        return lengths, np.where(gpu_later, last_gpu, np.where(self.has_tail, self.tail_row, -1))


class _WindowChain:
    """Each rank's windows in order (sql/whatif/45_coupling.sql's wi_window_origins): a window
    starts where the rank's previous one ended in the replay, plus the measured gap."""

    def __init__(self, origins: dict):
        self.origin0 = np.asarray(origins["origin_us"], dtype=float)    # measured, aligned start
        self.gap = np.nan_to_num(_column(origins, "gap_before_us"))
        previous = _column(origins, "previous_window", -1.0).astype(np.int64)
        self.head = previous < 0
        self.head_of = np.maximum.accumulate(np.where(self.head, np.arange(len(previous)), 0))
        self.previous = np.maximum(previous, 0)

    def origins(self, lengths: np.ndarray) -> np.ndarray:
        """A rank's window starts where its previous one ended (plus the measured gap); the
        first window of each rank at its measured, aligned start."""
        step = np.where(self.head, self.origin0, lengths[self.previous] + self.gap)
        total = np.cumsum(step)
        return total - total[self.head_of] + step[self.head_of]


class _StreamCarry:
    """A GPU stream runs on across step boundaries: the work a window launches on a stream
    queues behind what the rank's earlier windows launched there (as replayed), and the work
    measured in flight at a window's start (its carry-in node) moves as the end of that
    earlier work moves. Without this every window's GPU starts idle, and a change that makes
    a job without a sync in its step GPU-bound (data loading removed) predicts the CPU's pace.
    The measured stream ends keep the unchanged replay exact: work on a stream runs in launch
    order, so a window's first node there starts after the earlier windows' work ended."""

    MAX_ROUNDS = 100_000

    def __init__(self, graph: _Graph, chain: _WindowChain, keys: tuple, first_rows: tuple, carry_rows: tuple):
        self.graph, self.chain = graph, chain
        self.rows, self.row_window, self.row_stream = keys
        self.first_rows, self.first_window, self.first_stream = first_rows
        self.carry_rows, self.carry_window, self.carry_stream = carry_rows
        self.streams = int(max(self.row_stream.max(initial=-1), self.first_stream.max(initial=-1),
                               self.carry_stream.max(initial=-1))) + 1
        self.measured_before = self._ends_before(graph.measured_end, chain.origin0)
        # a first node recorded starting before the earlier work on its stream ended (clock
        # skew, copy engines) keeps that overlap, so the unchanged replay stays exact
        measured_start = chain.origin0[self.first_window] + graph.measured_start[self.first_rows]
        self.first_overlap = np.minimum(
            0.0, measured_start - self.measured_before[self.first_window, self.first_stream])

    @classmethod
    def build(cls, graph: _Graph, nodes: dict, chain: _WindowChain) -> "_StreamCarry | None":
        gpu = nodes["kind"] == "gpu"
        carry_in = np.asarray(nodes["carry_in"], dtype=bool)
        window = graph.window_of_row
        stream_ids = np.ma.filled(nodes["stream"].astype(np.int64), -1) if np.ma.isMaskedArray(
            nodes["stream"]) else np.asarray(nodes["stream"], dtype=np.int64)
        _, stream = np.unique(stream_ids, return_inverse=True)
        # a stream's end: every window's own work, and the first window's carry-in (launched
        # before the replay); later carry-in nodes repeat earlier windows' work
        counted = np.flatnonzero(gpu & (~carry_in | chain.head[window]))
        later = gpu & ~chain.head[window]
        own = np.flatnonzero(later & ~carry_in)
        carried = np.flatnonzero(later & carry_in)
        if own.size == 0 and carried.size == 0:
            return None
        # the first own node of each (window, stream), in node order (rows are ordered by seq)
        key = window[own] * (stream.max() + 1) + stream[own]
        _, first_index = np.unique(key, return_index=True)
        first = own[first_index]
        return cls(graph, chain, (counted, window[counted], stream[counted]),
                   (first, window[first], stream[first]), (carried, window[carried], stream[carried]))

    def _ends_before(self, end: np.ndarray, origin: np.ndarray) -> np.ndarray:
        """(window, stream) -> where the work launched on the stream before the window ends,
        in aligned time (-inf where none)."""
        ends = np.full((len(origin), self.streams), -np.inf)
        np.maximum.at(ends, (self.row_window, self.row_stream), origin[self.row_window] + end[self.rows])
        heads = np.flatnonzero(self.chain.head)
        for first, stop in zip(heads, np.append(heads[1:], len(origin))):
            np.maximum.accumulate(ends[first:stop], axis=0, out=ends[first:stop])
        before = np.full_like(ends, -np.inf)
        later = ~self.chain.head
        before[later] = ends[self.chain.previous[later]]
        return before

    def bounds(self, end: np.ndarray, origin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A floor for each window's first node on a stream, and the carry-in nodes' starts."""
        before = self._ends_before(end, origin)
        floor = np.full(self.graph.count, -np.inf)
        floor[self.first_rows] = (before[self.first_window, self.first_stream] - origin[self.first_window]
                                  + self.first_overlap)
        initial = self.graph.initial.copy()
        replayed = before[self.carry_window, self.carry_stream] - origin[self.carry_window]
        measured = (self.measured_before[self.carry_window, self.carry_stream]
                    - self.chain.origin0[self.carry_window])
        moved = np.where(np.isfinite(replayed) & np.isfinite(measured), replayed - measured, 0.0)
        initial[self.carry_rows] = initial[self.carry_rows] + moved
        return floor, initial

    def settle(self) -> np.ndarray:
        """Replay until every window's stream floors and carry-in starts stop moving (a window
        depends only on earlier ones, so at most one round per window of a rank)."""
        graph = self.graph
        start = graph.forward_pass()
        for _ in range(self.MAX_ROUNDS):
            floor, initial = self.bounds(start + graph.duration, self.chain.origins(graph.window_lengths(start)))
            settled = graph.forward_pass(floor, initial)
            if np.allclose(settled, start, rtol=0, atol=1e-6):
                return settled
            start = settled
        raise CtdaError("the replay of GPU streams across steps did not settle")


class _Coupling:
    """Collectives matched across the replayed ranks (sql/whatif/45_coupling.sql): the ranks'
    windows are solved together until every gate sits at its collective's last arrival."""

    MAX_ROUNDS = 10_000
    serialize = None    # whatif --cluster: a process group's transfers run one at a time

    def __init__(self, graph: _Graph, chain: "_WindowChain", arrivals: dict, gates: dict):
        self.graph, self.chain = graph, chain
        first = graph.first
        self.groups = int(max(arrivals["group_index"].max(initial=-1), gates["group_index"].max(initial=-1))) + 1
        self.a_group = np.asarray(arrivals["group_index"], dtype=np.int64)
        self.a_window = np.asarray(arrivals["window_index"], dtype=np.int64)
        anchor = np.asarray(arrivals["anchor_seq"], dtype=np.int64)
        self.a_row = np.where(anchor >= 0, first[self.a_window] + np.maximum(anchor, 0), 0)
        self.a_has_anchor = anchor >= 0
        self.a_pre_floor = np.asarray(arrivals["pre_floor"], dtype=bool)
        self.a_offset = np.asarray(arrivals["offset_us"], dtype=float)
        self.a_measured = np.asarray(arrivals["measured_us"], dtype=float)
        self.g_group = np.asarray(gates["group_index"], dtype=np.int64)
        self.g_window = np.asarray(gates["window_index"], dtype=np.int64)
        self.g_row = first[self.g_window] + np.asarray(gates["gate_seq"], dtype=np.int64)
        self.g_after = np.asarray(gates["after_us"], dtype=float)
        # a CPU gate that held its node replaces the engine edges' slack into it
        held = self.g_row[np.asarray(gates["binding"], dtype=bool)]
        graph.delay = np.where(np.isin(graph.dst, held), graph.delay - graph.slack,
                               graph.delay)
        # a NCCL kernel's node runs only its transfer, from the last arrival
        kernels = self.a_pre_floor
        share = np.nan_to_num(_column(arrivals, "wait_share", 0.0))[kernels]
        rows = self.a_row[kernels]
        waited = np.zeros(graph.count)
        waited[rows] = graph.duration[rows] * share
        graph.duration = graph.duration - waited
        graph.delay = graph.delay - waited[graph.src]

    @classmethod
    def load(cls, con, graph: _Graph, chain: "_WindowChain") -> "_Coupling | None":
        arrivals = con.execute("SELECT * FROM wi_coupled_arrivals ORDER BY ALL").fetchnumpy()
        if len(arrivals["group_index"]) == 0:
            return None
        gates = con.execute("SELECT * FROM wi_coupled_gates ORDER BY ALL").fetchnumpy()
        return cls(graph, chain, arrivals, gates)

    def floors(self, completion: np.ndarray, origin: np.ndarray) -> np.ndarray:
        floor = np.full(self.graph.count, -np.inf)
        np.maximum.at(floor, self.g_row, completion[self.g_group] + self.g_after - origin[self.g_window])
        return floor

    def solve(self, carry: "_StreamCarry | None" = None) -> np.ndarray:
        graph = self.graph
        origin = self.chain.origin0
        completion = np.full(self.groups, -np.inf)
        np.maximum.at(completion, self.a_group, self.a_measured)
        floor = self.floors(completion, origin)
        carry_floor, initial = None, None
        for _ in range(self.MAX_ROUNDS):
            start = graph.forward_pass(floor if carry_floor is None else np.maximum(floor, carry_floor), initial)
            new_origin = self.chain.origins(graph.window_lengths(start))
            base = np.where(self.a_pre_floor, graph.arrivals(start)[self.a_row], start[self.a_row])
            arrival = new_origin[self.a_window] + np.where(self.a_has_anchor, base, 0.0) + self.a_offset
            completion = np.full(self.groups, -np.inf)
            np.maximum.at(completion, self.a_group, arrival)
            if self.serialize is not None:
                completion = self.serialize(completion)
            new_floor = self.floors(completion, new_origin)
            settled = (np.allclose(new_floor, floor, rtol=0, atol=1e-6)
                       and np.allclose(new_origin, origin, rtol=0, atol=1e-6))
            if carry is not None:
                new_carry_floor, new_initial = carry.bounds(start + graph.duration, new_origin)
                settled = settled and carry_floor is not None and np.allclose(
                    new_carry_floor, carry_floor, rtol=0, atol=1e-6) and np.allclose(
                    new_initial, initial, rtol=0, atol=1e-6)
                carry_floor, initial = new_carry_floor, new_initial
            if settled:
                self.origin = new_origin
                return start
            floor, origin = new_floor, new_origin
        raise CtdaError("the multi-rank replay did not settle; run with --no-coupling")

    def held_by(self, start: np.ndarray) -> np.ndarray:
        """Row -> the node the path continues from where a collective's completion held the
        row (-1 elsewhere): the last rank to arrive, at the node that made its arrival (the
        CPU node that made the call; for a NCCL kernel, the node its edges waited for). The
        wait is spent there, often on another rank, so the path follows it (issue 33)."""
        graph, origin = self.graph, self.origin
        arrive = graph.arrivals(start)
        base = np.where(self.a_pre_floor, arrive[self.a_row], start[self.a_row])
        arrival = origin[self.a_window] + np.where(self.a_has_anchor, base, 0.0) + self.a_offset
        # each group's last arrival (the first such row on a tie)
        order = np.lexsort((-arrival, self.a_group))
        groups, first = np.unique(self.a_group[order], return_index=True)
        last = np.full(self.groups, -1)
        last[groups] = order[first]
        # the node each arrival came from
        allowed = start[graph.src] + graph.delay
        binding = np.isclose(allowed, arrive[graph.dst], rtol=0, atol=TIME_ATOL_US)
        edge_source = np.full(graph.count, -1, dtype=np.int64)
        edge_source[graph.dst[binding]] = graph.src[binding]
        source = np.where(self.a_has_anchor, np.where(self.a_pre_floor, edge_source[self.a_row], self.a_row), -1)
        # a gate held its node when the node starts at the gate's floor and its edges let it go sooner
        completion = np.full(self.groups, -np.inf)
        np.maximum.at(completion, self.a_group, arrival)
        floor = completion[self.g_group] + self.g_after - origin[self.g_window]
        held = (np.isclose(start[self.g_row], floor, rtol=0, atol=TIME_ATOL_US)
                & (arrive[self.g_row] < start[self.g_row] - TIME_ATOL_US) & (last[self.g_group] >= 0))
        out = np.full(graph.count, -1, dtype=np.int64)
        out[self.g_row[held]] = source[last[self.g_group[held]]]
        return out


def _finish(graph: _Graph, windows, nodes, start, best_source) -> _Replay:
    end = start + graph.duration
    lengths, backtrack_from = graph.window_ends(start)
    results, paths = {}, {}
    for i in np.flatnonzero(graph.reported):
        window = int(windows["window_index"][i])
        results[window] = (int(windows["run_id"][i]), int(windows["rank"][i]), int(windows["step"][i]),
                           float(windows["window_us"][i]), float(lengths[i]))
        paths[window] = _backtrack(int(backtrack_from[i]), best_source)
    # window_index is dense from 0: a row's window indexes the windows' columns
    row_rank = np.asarray(windows["rank"], dtype=np.int64)[graph.window_of_row]
    row_step = np.asarray(windows["step"], dtype=np.int64)[graph.window_of_row]
    return _Replay(results, nodes, start, _shown_end(nodes, graph.first, start, end), paths, row_rank, row_step)


def _shown_end(nodes, first, start, end) -> np.ndarray:
    """Where each node ends in the path's rows: a CPU node that ends in a blocking sync keeps its
    measured wait in its duration, but the replay lets what follows it go when the GPU work
    is done, so it is shown ending where the next node on its thread starts."""
    shown = end.copy()
    rows = np.flatnonzero(np.asarray(nodes["ends_with_sync"], dtype=bool))
    following = _column(nodes, "next_on_lane_seq", -1.0)[rows].astype(np.int64)
    rows, following = rows[following >= 0], following[following >= 0]
    if rows.size:
        after = first[np.asarray(nodes["window_index"], dtype=np.int64)[rows]] + following
        shown[rows] = np.clip(start[after], start[rows], end[rows])
    return shown


def _backtrack(last: int, best_source: np.ndarray) -> list[int]:
    path, seen = [], set()
    # a path that crosses ranks moves back in aligned time, but two nodes can tie: never loop
    while last >= 0 and last not in seen:
        path.append(last)
        seen.add(last)
        last = int(best_source[last])
    return path[::-1]


# ---- results ----------------------------------------------------------------------------

def _step_rows(con, baseline: _Replay, predicted: _Replay) -> list[tuple]:
    rows = []
    for window, (run_id, rank, step, measured, replay) in baseline.windows.items():
        after = predicted.windows[window][4]
        rows.append((run_id, rank, step, round(measured, 3), round(replay, 3), round(after, 3),
                     round(replay / after, 4) if after > 0 else float("inf")))
    return rows


def _path_rows(replay: _Replay) -> list[tuple]:
    n = replay.nodes
    measured = np.asarray(n["end_us"], dtype=float) - np.asarray(n["start_us"], dtype=float)
    rows = []
    for window, path in replay.paths.items():
        run_id, rank, step = replay.windows[window][:3]
        for seq, row in enumerate(path, start=1):
            rows.append((run_id, rank, step, seq, int(n["node_id"][row]), str(n["kind"][row]),
                         str(n["label"][row]), float(measured[row]), float(replay.end[row] - replay.start[row]),
                         int(replay.row_rank[row]), int(replay.row_step[row])))
    return rows


def _hotspots(path: list[tuple], top: int) -> list[tuple]:
    totals: dict[tuple, list] = {}
    for *_, kind, label, measured, predicted, _node_rank, _node_step in path:
        entry = totals.setdefault((kind, label), [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += measured
        entry[2] += predicted
    ranked = sorted(totals.items(), key=lambda item: -item[1][2])[:top]
    return [(kind, label, count, round(m, 1), round(p, 1)) for (kind, label), (count, m, p) in ranked]


def _persist(con, scenario: str, changes: str, steps: list[tuple], path: list[tuple]) -> None:
    """Store one scenario's rows (inside the caller's transaction)."""
    step_table = pa.table({name: [r[i] for r in steps] for i, name in enumerate(
        ["run_id", "rank", "step", "measured_us", "replay_us", "predicted_us", "speedup"])})
    path_schema = pa.schema([("run_id", pa.int32()), ("rank", pa.int32()), ("step", pa.int64()),
                             ("seq", pa.int64()), ("node_id", pa.int64()), ("kind", pa.string()),
                             ("label", pa.string()), ("measured_us", pa.float64()), ("predicted_us", pa.float64()),
                             ("node_rank", pa.int32()), ("node_step", pa.int64())])
    path_table = pa.table({name: [r[i] for r in path] for i, name in enumerate(path_schema.names)},
                          schema=path_schema)
    con.register("wi_result_steps", step_table)
    con.register("wi_result_path", path_table)
    try:
        _execute(con, "whatif/50_persist.sql", {"scenario": scenario, "changes": changes})
    finally:
        con.unregister("wi_result_steps")
        con.unregister("wi_result_path")
