"""The replay solved in one ordered pass: every quantity the coupled replay settles
by repeated forward passes (graph.py's Coupling.solve and StreamCarry.settle) is a max-plus
function of earlier ones, so one pass in topological order computes the same fixed point.

The repeated passes settle one more collective, or one more window of a rank, per round: a
chain of K collectives that a change moves costs K passes over every node (quadratic). Here
the quantities are vertices of one graph, in absolute time (shifted to the earliest origin):

  rows      a node's start: after its edges' sources (+ delay), its window's origin (+ its
            lead, when it has no predecessor), its gates' collectives (+ after_us), and for a
            window's first node on a GPU stream, the end of the rank's earlier work there
  origins   a window's start: its measured start for a rank's first window, else where the
            previous window ended (its CPU tail, launch-queue gate, or last GPU node) + the gap
  groups    a collective's completion: its last arrival; a NCCL chain's transfers run in turn
            (FIFO: after the previous one's start + transfer); a gloo chain's share the link
            (processor sharing: a delay per collective, settled by repeating the pass)
  befores   per (window, stream): where the rank's work launched there before the window ends

Vertices are ordered once (Kahn's algorithm, a level of vertices at a time); each pass pushes
a level's values along its out-edges with numpy. A graph that is not acyclic (inconsistent
matching) returns None, and the caller keeps the repeated passes."""

from __future__ import annotations

import numpy as np

from ctda_sql.core.errors import CtdaError

# a pass repeated for processor sharing stops when no collective's delay moves more than this
SETTLED_US = 1e-7
MAX_SHARING_PASSES = 1_000


class _Edges:
    """Max-plus edges (value[dst] >= value[src] + delay), collected before ordering."""

    def __init__(self):
        self.src, self.dst, self.delay = [], [], []

    def add(self, src, dst, delay) -> None:
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        delay = np.broadcast_to(np.asarray(delay, dtype=float), src.shape)
        keep = np.isfinite(delay)
        self.src.append(src[keep])
        self.dst.append(dst[keep])
        self.delay.append(delay[keep])

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.concatenate(self.src or [np.empty(0, np.int64)]),
                np.concatenate(self.dst or [np.empty(0, np.int64)]),
                np.concatenate(self.delay or [np.empty(0)]))


# a level with fewer vertices than this is walked in Python: a long chain (a rank's windows one
# after another) has thousands of levels of one or two vertices, where numpy's per-call cost
# (a dozen calls a level) is most of the work
SMALL_LEVEL = 16


def levels(vertices: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    """Each vertex's level (longest chain of edges into it), or None if the edges hold a cycle."""
    level = _kahn(vertices, src, dst)
    return level if (level >= 0).all() else None


def _kahn(vertices: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Each vertex's level; -1 for a vertex on a cycle or after one."""
    order = np.argsort(src, kind="stable")
    targets = dst[order]
    bounds = np.searchsorted(src[order], np.arange(vertices + 1))
    waiting = np.bincount(dst, minlength=vertices)
    level = np.full(vertices, -1, dtype=np.int64)
    frontier, depth = np.flatnonzero(waiting == 0), 0
    while frontier.size:
        level[frontier] = depth
        if frontier.size < SMALL_LEVEL:
            frontier = _next_small(frontier, bounds, targets, waiting)
        else:
            frontier = _next(frontier, bounds, targets, waiting)
        depth += 1
    return level


def _runs(first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The indices first[i] .. first[i] + count[i] - 1 of every run, laid end to end."""
    return np.repeat(first - np.cumsum(count) + count, count) + np.arange(int(count.sum()))


def _next(frontier, bounds, targets, waiting) -> np.ndarray:
    """The vertices whose last edge in comes from the frontier."""
    index = _runs(bounds[frontier], bounds[frontier + 1] - bounds[frontier])  # the frontier's out-edges
    if index.size == 0:
        return frontier[:0]
    reached, times = np.unique(targets[index], return_counts=True)
    waiting[reached] -= times
    return reached[waiting[reached] == 0]


def _next_small(frontier, bounds, targets, waiting) -> np.ndarray:
    ready = []
    for vertex in frontier.tolist():
        for target in targets[bounds[vertex]:bounds[vertex + 1]].tolist():
            waiting[target] -= 1
            if waiting[target] == 0:
                ready.append(target)
    return np.array(sorted(ready), dtype=np.int64)


class OrderedReplay:
    """The coupled replay's rows, origins, collectives and stream ends as one ordered graph."""

    def __init__(self, graph, chain, coupling=None, carry=None):
        self.graph, self.chain, self.coupling, self.carry = graph, chain, coupling, carry
        rows, windows = graph.count, len(chain.origin0)
        groups = coupling.groups if coupling is not None else 0
        streams = carry.streams if carry is not None else 0
        self.origin_at, self.group_at = rows, rows + windows
        self.before_at = rows + windows + groups
        self.vertices = self.before_at + windows * streams
        self.shift = float(chain.origin0.min()) if windows else 0.0
        self.base = np.full(self.vertices, -np.inf)    # a vertex's own floor, before any edge
        self.sharing: list[np.ndarray] = []            # processor-sharing chains' group rows
        # each later window of a rank, the one before it, and window -> the one after (-1: none)
        self.later = np.flatnonzero(~chain.head)
        self.previous = chain.previous[self.later]
        self.next_window = np.full(windows, -1, dtype=np.int64)
        self.next_window[self.previous] = self.later
        edges = _Edges()
        self._rows(edges)
        self._origins(edges)
        if coupling is not None:
            self._groups(edges)
        if carry is not None:
            self._befores(edges)
        self.src, self.dst, self.delay = edges.arrays()

    # ---- the graph ----------------------------------------------------------------------
    def _rows(self, edges: _Edges) -> None:
        graph = self.graph
        edges.add(graph.src, graph.dst, graph.delay)
        lead = graph.initial.copy()
        if self.carry is not None:
            # a carry-in node moves with the end of the earlier work it continues (_befores)
            lead[self.carry.carry_rows[self._carry_measured()]] = -np.inf
        rows = np.arange(graph.count)
        edges.add(self.origin_at + graph.window_of_row, rows, lead)

    def _origins(self, edges: _Edges) -> None:
        """A window starts where the rank's previous one ended (graph.Graph._lengths), + the gap."""
        graph, chain = self.graph, self.chain
        heads = np.flatnonzero(chain.head)
        self.base[self.origin_at + heads] = chain.origin0[heads] - self.shift
        later, previous = self.later, self.previous
        gap = chain.gap[later]
        to = self.origin_at + later
        tail = graph.has_tail[previous]
        edges.add(graph.tail_row[previous[tail]], to[tail],
                  graph.duration[graph.tail_row[previous[tail]]] + graph.tail_us[previous[tail]] + gap[tail])
        edges.add(self.origin_at + previous[~tail], to[~tail], graph.cpu_end_us[previous[~tail]] + gap[~tail])
        edges.add(self.origin_at + previous, to, graph.gated_us[previous] + gap)
        # a window that runs on to its device work ends at its last GPU node when later
        gpu = np.flatnonzero(graph.gpu & graph.device_ends[graph.window_of_row])
        gpu = gpu[self.next_window[graph.window_of_row[gpu]] >= 0]
        following = self.next_window[graph.window_of_row[gpu]]
        edges.add(gpu, self.origin_at + following, graph.duration[gpu] + chain.gap[following])

    def _groups(self, edges: _Edges) -> None:
        """Arrivals into collectives (Coupling.solve's `arrival`), gates out of them, and the
        order a NCCL chain's transfers run in."""
        graph, c = self.graph, self.coupling
        group = self.group_at + c.a_group
        plain = c.a_has_anchor & ~c.a_pre_floor
        edges.add(c.a_row[plain], group[plain], c.a_offset[plain])
        unanchored = ~c.a_has_anchor
        edges.add(self.origin_at + c.a_window[unanchored], group[unanchored], c.a_offset[unanchored])
        # a NCCL kernel arrives when its edges let it go (graph.arrivals: no floor, no carry)
        pre = np.flatnonzero(c.a_has_anchor & c.a_pre_floor)
        edges.add(self.origin_at + c.a_window[pre], group[pre], graph.initial[c.a_row[pre]] + c.a_offset[pre])
        by_dst = np.argsort(graph.dst, kind="stable")
        lo = np.searchsorted(graph.dst[by_dst], c.a_row[pre], side="left")
        hi = np.searchsorted(graph.dst[by_dst], c.a_row[pre], side="right")
        edge = by_dst[_runs(lo, hi - lo)]
        arrival = np.repeat(pre, hi - lo)
        edges.add(graph.src[edge], group[arrival], graph.delay[edge] + c.a_offset[arrival])
        edges.add(self.group_at + c.g_group, c.g_row, c.g_after)
        serialize = c.serialize
        if serialize is None:
            return
        for rows, shared in zip(serialize.segments, serialize.shared):
            if shared:
                self.sharing.append(rows)
            elif len(rows) > 1:  # FIFO: a transfer starts once the previous one's is done
                edges.add(self.group_at + rows[:-1], self.group_at + rows[1:], serialize.transfer[rows[:-1]])

    def _befores(self, edges: _Edges) -> None:
        """(window, stream) -> the end of the rank's earlier work on the stream (StreamCarry)."""
        carry, chain = self.carry, self.chain
        streams = carry.streams
        later, previous = self.later, self.previous
        every = np.arange(streams)
        # the previous window's own end there, and what ended before it
        from_previous = ~chain.head[previous]
        edges.add((self.before_at + previous[from_previous, None] * streams + every).ravel(),
                  (self.before_at + later[from_previous, None] * streams + every).ravel(), 0.0)
        following = self.next_window[carry.row_window]
        counted = following >= 0
        edges.add(carry.rows[counted], self.before_at + following[counted] * streams + carry.row_stream[counted],
                  self.graph.duration[carry.rows[counted]])
        edges.add(self.before_at + carry.first_window * streams + carry.first_stream, carry.first_rows,
                  carry.first_overlap)
        moved = self._carry_measured()
        rows = carry.carry_rows[moved]
        measured = (carry.measured_before[carry.carry_window, carry.carry_stream]
                    - chain.origin0[carry.carry_window])[moved]
        edges.add(self.before_at + carry.carry_window[moved] * streams + carry.carry_stream[moved], rows,
                  self.graph.initial[rows] - measured)

    def _carry_measured(self) -> np.ndarray:
        """Carry-in nodes that continue measured earlier work (StreamCarry.bounds' `moved`)."""
        carry = self.carry
        return np.isfinite(carry.measured_before[carry.carry_window, carry.carry_stream])

    # ---- the solve ----------------------------------------------------------------------
    def solve(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(start of every row relative to its window's origin, every window's origin), or
        None where the dependencies form a cycle."""
        level = levels(self.vertices, self.src, self.dst)
        if level is None:
            self._refuse_a_growing_cycle()
            return None
        vertex_order = np.argsort(level, kind="stable")
        vertex_bounds = np.searchsorted(level[vertex_order], np.arange(level.max(initial=-1) + 2))
        edge_order = np.argsort(level[self.src], kind="stable")
        src, dst, delay = self.src[edge_order], self.dst[edge_order], self.delay[edge_order]
        edge_bounds = np.searchsorted(level[src], np.arange(level.max(initial=-1) + 2))
        post = np.zeros(self.vertices)     # a gloo collective's wait for the shared link
        for _ in range(MAX_SHARING_PASSES):
            value = self._pass(vertex_order, vertex_bounds, src, dst, delay, edge_bounds, post)
            shared_post = self._sharing_delays(value - post)
            if np.allclose(shared_post, post, rtol=0, atol=SETTLED_US):
                return self._relative(value)
            post = shared_post
        # only a cluster's gloo chains share links, and --cluster needs the coupling: no hint to drop it
        raise CtdaError(f"the projection did not settle: the gloo collectives' shares of the links still "
                        f"moved after {MAX_SHARING_PASSES:,} passes")

    def _refuse_a_growing_cycle(self) -> None:
        """A cycle whose delays add up to more than 0 (a matched collective that waits, through
        gates and the nodes of its ranks, for its own completion) moves every round by that
        much and never settles: refuse it now, naming the collective that closes it, instead
        of after MAX_ROUNDS rounds (minutes on a long run). A cycle of no delay is left to
        the rounds, which settle it."""
        cycle = find_cycle(self.vertices, self.src, self.dst, self.delay)
        if cycle is None:
            return
        vertices, weight = cycle
        groups = [int(v) - self.group_at for v in vertices if self.group_at <= v < self.before_at]
        if weight <= SETTLED_US or not groups:
            return
        describe = getattr(self.coupling, "describe", None)
        name = describe(groups[0]) if describe is not None else f"collective group {groups[0]}"
        raise CtdaError(f"the matched collectives form a cycle that the replay cannot order: {name} waits "
                        f"for its own completion (+{weight:,.1f} µs a turn, through {len(groups)} "
                        f"collective(s)); their matching in collective_instances is not causal "
                        f"(`--no-coupling` replays each rank alone)")

    def _pass(self, vertex_order, vertex_bounds, src, dst, delay, edge_bounds, post) -> np.ndarray:
        best = self.base.copy()
        value = np.full(self.vertices, -np.inf)
        for depth in range(len(vertex_bounds) - 1):
            level = vertex_order[vertex_bounds[depth]:vertex_bounds[depth + 1]]
            value[level] = best[level] + post[level]
            lo, hi = edge_bounds[depth], edge_bounds[depth + 1]
            if hi > lo:
                np.maximum.at(best, dst[lo:hi], value[src[lo:hi]] + delay[lo:hi])
        return value

    def _sharing_delays(self, arrival: np.ndarray) -> np.ndarray:
        """Each gloo collective's wait for the link its chain shares (cluster.processor_sharing),
        from this pass's last arrivals."""
        from ctda_sql.whatif.cluster import processor_sharing

        post = np.zeros(self.vertices)
        transfer = self.coupling.serialize.transfer if self.sharing else None
        for rows in self.sharing:
            last = arrival[self.group_at + rows]
            start = processor_sharing(last, transfer[rows]) - transfer[rows]
            with np.errstate(invalid="ignore"):  # a collective without arrivals waits for nothing
                post[self.group_at + rows] = np.where(np.isfinite(last), start - last, 0.0)
        return post

    def _relative(self, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        origin = value[self.origin_at:self.group_at]
        start = value[:self.graph.count] - origin[self.graph.window_of_row]
        return start, origin + self.shift


def find_cycle(vertices: int, src: np.ndarray, dst: np.ndarray,
               delay: np.ndarray) -> tuple[list[int], float] | None:
    """One cycle of the edges, (its vertices in order, the sum of its delays), or None. Kahn's
    order stops at the cycles; of the vertices it leaves, those with no edge out to the others
    are dropped until none is (what stays is on a cycle or between two), and a walk along the
    longest edge out of each reaches a vertex twice: the cycle is the walk from it."""
    stuck = _kahn(vertices, src, dst) < 0
    if not stuck.any():
        return None
    keep = stuck[src] & stuck[dst]
    src, dst, delay = src[keep], dst[keep], delay[keep]
    out = np.bincount(src, minlength=vertices)
    by_dst = np.argsort(dst, kind="stable")
    sources, bounds = src[by_dst], np.searchsorted(dst[by_dst], np.arange(vertices + 1))
    alive = stuck.copy()
    frontier = np.flatnonzero(alive & (out == 0))
    while frontier.size:
        alive[frontier] = False
        index = _runs(bounds[frontier], bounds[frontier + 1] - bounds[frontier])
        reached, times = np.unique(sources[index], return_counts=True)
        out[reached] -= times
        frontier = reached[alive[reached] & (out[reached] == 0)]
    keep = alive[src] & alive[dst]
    src, dst, delay = src[keep], dst[keep], delay[keep]
    if not src.size:
        return None
    order = np.lexsort((-delay, src))                   # each vertex's longest edge out first
    first = order[np.unique(src[order], return_index=True)[1]]
    step = dict(zip(src[first].tolist(), zip(dst[first].tolist(), delay[first].tolist())))
    seen: dict[int, int] = {}
    walk: list[int] = []
    vertex = int(src[first[0]])
    while vertex not in seen:
        seen[vertex] = len(walk)
        walk.append(vertex)
        vertex = step[vertex][0]
    cycle = walk[seen[vertex]:]
    return cycle, float(sum(step[v][1] for v in cycle))


def describe_group(con, group: int) -> str:
    """A coupled collective as collective_instances names it: its run, process group and
    sequence number, and the ranks' steps its calls are in."""
    rows = con.execute(
        "SELECT r.name, g.pg, g.seq, w.rank, w.step FROM wi_coupled_groups AS g JOIN runs AS r USING (run_id) "
        "JOIN wi_coupled_arrivals AS a USING (group_index) JOIN wi_windows AS w USING (window_index) "
        "WHERE g.group_index = $group ORDER BY w.rank, w.step", {"group": group}).fetchall()
    if not rows:
        return f"collective group {group}"
    run, pg, seq = rows[0][:3]
    calls = ", ".join(dict.fromkeys(f"rank {rank} step {step}" for *_, rank, step in rows))
    return f"the collective of run {run!r}, process group {pg}, seq {seq} ({calls})"
