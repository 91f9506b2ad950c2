"""The replay's dependency graph in numpy: the forward pass (max-plus), a rank's windows
chained in time, streams carried across windows, and collectives coupling ranks
(warehouse/whatif/replay.py builds it from the SQL stages and reads the results)."""

from __future__ import annotations

import numpy as np

from ctda_sql.core.errors import CtdaError
from ctda_sql.whatif.ordered import OrderedReplay, describe_group

# replayed instants closer than this are the same (the coupled solve settles to 1e-6 µs)
TIME_ATOL_US = 1e-5


def first_rows(window_of_node: np.ndarray, window_count: int) -> np.ndarray:
    """Row of each window's first node (nodes are ordered by window, then seq)."""
    return np.searchsorted(np.asarray(window_of_node), np.arange(window_count))


def column(table: dict, name: str, fill=np.nan) -> np.ndarray:
    values = table[name]
    return np.ma.filled(values.astype(float), fill) if np.ma.isMaskedArray(values) else np.asarray(values, dtype=float)


class Graph:
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
        tail = column(windows, "tail_seq")
        self.has_tail = ~np.isnan(tail)
        self.tail_row = np.where(self.has_tail, first + np.nan_to_num(tail).astype(np.int64), 0)
        self.tail_us = np.nan_to_num(column(windows, "tail_us"))
        self.cpu_end_us = np.asarray(windows["cpu_end_us"], dtype=float)
        # a window that waited for launch-queue slots keeps the GPU's pace (40_graph.sql)
        self.gated_us = column(windows, "gated_us", -np.inf)
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


class WindowChain:
    """Each rank's windows in order (sql/whatif/45_coupling.sql's wi_window_origins): a window
    starts where the rank's previous one ended in the replay, plus the measured gap."""

    def __init__(self, origins: dict):
        self.origin0 = np.asarray(origins["origin_us"], dtype=float)    # measured, aligned start
        self.gap = np.nan_to_num(column(origins, "gap_before_us"))
        previous = column(origins, "previous_window", -1.0).astype(np.int64)
        self.head = previous < 0
        self.head_of = np.maximum.accumulate(np.where(self.head, np.arange(len(previous)), 0))
        self.previous = np.maximum(previous, 0)

    def origins(self, lengths: np.ndarray) -> np.ndarray:
        """A rank's window starts where its previous one ended (plus the measured gap); the
        first window of each rank at its measured, aligned start."""
        step = np.where(self.head, self.origin0, lengths[self.previous] + self.gap)
        total = np.cumsum(step)
        return total - total[self.head_of] + step[self.head_of]


class StreamCarry:
    """A GPU stream runs on across step boundaries: the work a window launches on a stream
    queues behind what the rank's earlier windows launched there (as replayed), and the work
    measured in flight at a window's start (its carry-in node) moves as the end of that
    earlier work moves. Without this every window's GPU starts idle, and a change that makes
    a job without a sync in its step GPU-bound (data loading removed) predicts the CPU's pace.
    The measured stream ends keep the unchanged replay exact: work on a stream runs in launch
    order, so a window's first node there starts after the earlier windows' work ended."""

    MAX_ROUNDS = 100_000
    FAST_ROUNDS = 8    # then one ordered pass (ordered.py): a round settles one window more

    def __init__(self, graph: Graph, chain: WindowChain, keys: tuple, first_rows: tuple, carry_rows: tuple):
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
        self._anchor_carry_at_end()

    def _anchor_carry_at_end(self) -> None:
        """A carry-in node that continues earlier windows' work ends where that work ends in
        their replay (bounds' `moved`), its scaled duration before that end. Its lead from the
        SQL (the window start less the time removed before it) would count a change to a kernel
        running across the boundary a second time: once where it was launched, and again in
        the part of this node before its end (docs/method.md, "A kernel carried across steps")."""
        graph = self.graph
        repeats = self.carry_rows[np.isfinite(self.measured_before[self.carry_window, self.carry_stream])]
        graph.initial[repeats] = graph.measured_end[repeats] - graph.duration[repeats]

    @classmethod
    def build(cls, graph: Graph, nodes: dict, chain: WindowChain) -> "StreamCarry | None":
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
        for round_ in range(self.MAX_ROUNDS):
            if round_ == self.FAST_ROUNDS and (ordered := OrderedReplay(graph, self.chain, carry=self).solve()):
                return ordered[0]
            floor, initial = self.bounds(start + graph.duration, self.chain.origins(graph.window_lengths(start)))
            settled = graph.forward_pass(floor, initial)
            if np.allclose(settled, start, rtol=0, atol=1e-6):
                return settled
            start = settled
        raise CtdaError("the replay of GPU streams across steps did not settle")


class Coupling:
    """Collectives matched across the replayed ranks (sql/whatif/45_coupling.sql): the ranks'
    windows are solved together until every gate sits at its collective's last arrival."""

    MAX_ROUNDS = 10_000
    # a round settles one collective more (of a chain the change moved); after these, one
    # ordered pass (ordered.py) solves the rest, unless the matching holds a cycle
    FAST_ROUNDS = 8
    serialize = None    # whatif --cluster: a process group's transfers run one at a time

    def __init__(self, graph: Graph, chain: "WindowChain", arrivals: dict, gates: dict):
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
        share = np.nan_to_num(column(arrivals, "wait_share", 0.0))[kernels]
        rows = self.a_row[kernels]
        waited = np.zeros(graph.count)
        waited[rows] = graph.duration[rows] * share
        graph.duration = graph.duration - waited
        graph.delay = graph.delay - waited[graph.src]

    @classmethod
    def load(cls, con, graph: Graph, chain: "WindowChain") -> "Coupling | None":
        arrivals = con.execute("SELECT * FROM wi_coupled_arrivals ORDER BY ALL").fetchnumpy()
        if len(arrivals["group_index"]) == 0:
            return None
        gates = con.execute("SELECT * FROM wi_coupled_gates ORDER BY ALL").fetchnumpy()
        coupling = cls(graph, chain, arrivals, gates)
        coupling.describe = lambda group: describe_group(con, group)  # names a cycle's collective (ordered.py)
        return coupling

    def floors(self, completion: np.ndarray, origin: np.ndarray) -> np.ndarray:
        floor = np.full(self.graph.count, -np.inf)
        np.maximum.at(floor, self.g_row, completion[self.g_group] + self.g_after - origin[self.g_window])
        return floor

    def arrival_times(self, start: np.ndarray, origin: np.ndarray, arrive: np.ndarray) -> np.ndarray:
        """Each arrival in aligned time: a NCCL kernel's where its edges let it go (`arrive`:
        graph.arrivals), a call's at its anchor node, plus the measured offset."""
        base = np.where(self.a_pre_floor, arrive[self.a_row], start[self.a_row])
        return origin[self.a_window] + np.where(self.a_has_anchor, base, 0.0) + self.a_offset

    def last_arrivals(self, arrival: np.ndarray) -> np.ndarray:
        completion = np.full(self.groups, -np.inf)
        np.maximum.at(completion, self.a_group, arrival)
        return completion

    def next_floors(self, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One round: the windows' origins and the gates' floors that the nodes' starts give."""
        graph = self.graph
        origin = self.chain.origins(graph.window_lengths(start))
        completion = self.last_arrivals(self.arrival_times(start, origin, graph.arrivals(start)))
        if self.serialize is not None:
            completion = self.serialize(completion)
        return origin, self.floors(completion, origin)

    def solve(self, carry: "StreamCarry | None" = None) -> np.ndarray:
        graph = self.graph
        origin = self.chain.origin0
        floor = self.floors(self.last_arrivals(self.a_measured), origin)
        carry_floor, initial = None, None
        for round_ in range(self.MAX_ROUNDS):
            if round_ == self.FAST_ROUNDS and (ordered := OrderedReplay(graph, self.chain, self, carry).solve()):
                start, self.origin = ordered
                return start
            start = graph.forward_pass(floor if carry_floor is None else np.maximum(floor, carry_floor), initial)
            new_origin, new_floor = self.next_floors(start)
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
        wait is spent there, often on another rank, so the path follows it."""
        graph, origin = self.graph, self.origin
        arrive = graph.arrivals(start)
        arrival = self.arrival_times(start, origin, arrive)
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
        floor = self.last_arrivals(arrival)[self.g_group] + self.g_after - origin[self.g_window]
        held = (np.isclose(start[self.g_row], floor, rtol=0, atol=TIME_ATOL_US)
                & (arrive[self.g_row] < start[self.g_row] - TIME_ATOL_US) & (last[self.g_group] >= 0))
        out = np.full(graph.count, -1, dtype=np.int64)
        out[self.g_row[held]] = source[last[self.g_group[held]]]
        return out
