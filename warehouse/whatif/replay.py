"""What-if replay: predict every step's time under a change by replaying its dependency graph.

The SQL stages in sql/whatif/ prepare, set-based, each node's duration under the scenario
and each edge's measured slack; the forward pass here walks the nodes of all windows at once
in dependency order (one numpy step per position in the window's node order)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa

from ctda_sql.core import stages
from ctda_sql.core.errors import CtdaError
from ctda_sql.core.transaction import transaction
from ctda_sql.engine.analyze import run_id_or_all
from ctda_sql.whatif.changes import Scale, Scenario  # noqa: F401  (part of this module's API)
from ctda_sql.whatif.graph import Coupling, Graph, StreamCarry, WindowChain, column, first_rows

# once per what-if (the windows and their graph), then once per replayed scenario; each
# group runs in the order its contracts ask (core.stages.ordered)
SCOPE = ("10_scope.sql", "15_graph.sql")
PREPARE = ("17_rules.sql", "20_collectives.sql", "30_work_factors.sql", "40_graph.sql", "45_coupling.sql")
# a CPU thread of the graph idle this long waited for another thread when that thread's work
# ended at most HANDOFF_US before it resumed (hand-offs take 0.1-3 ms, up to 4.7 ms measured
# under contention: a woken thread may wait a GIL switch interval, 5 ms; docs/whatif.md)
MIN_WAIT_US = 500.0
HANDOFF_US = 5000.0
# a CPU thread blocked in a collective's wait resumes within this long of its end (as the
# cross-rank path, warehouse/engine/crossrank.py)
RESUME_US = 1000.0
# a launch call this much slower than its name's median waited for a launch-queue slot; a
# window whose launches waited this share of its length kept the GPU's pace
QUEUE_WAIT_US = 100.0
QUEUE_SHARE = 0.1
# the start and end of each step in the unchanged replay and in the scenario's, from the
# replay's origin (the earliest start of the run's replayed steps): a step that starts sooner
# because earlier work was removed may wait longer, and read slower, in the same job time
STEP_COLUMNS = ["run", "rank", "step", "measured_us", "replay_us", "predicted_us", "speedup",
                "replay_start_us", "replay_end_us", "predicted_start_us", "predicted_end_us"]
# per rank, the reported steps together: what a change buys the rank however the steps shift
TOTAL_COLUMNS = ["run", "rank", "steps", "measured_us", "replay_us", "predicted_us", "speedup"]
HOTSPOT_COLUMNS = ["kind", "label", "nodes", "measured_us", "predicted_us"]
# one row per value of a sweep
SWEEP_COLUMNS = ["value", "steps", "measured_us", "replay_us", "predicted_us", "speedup"]


@dataclass
class WhatIfResult:
    steps: list[tuple] = field(default_factory=list)      # STEP_COLUMNS
    hotspots: list[tuple] = field(default_factory=list)   # HOTSPOT_COLUMNS

    @property
    def totals(self) -> list[tuple]:
        """TOTAL_COLUMNS: per rank, the sums of its steps' times (rank order)."""
        return step_totals(self.steps)
    path: list[tuple] = field(default_factory=list)       # each window's replayed path (_path_rows)


def step_totals(steps: list[tuple]) -> list[tuple]:
    """Per (run, rank) of STEP_COLUMNS rows: the steps, the sums of their times, the speedup."""
    sums: dict[tuple, list] = {}
    for run, rank, _step, measured, replay, predicted, *_ in steps:
        entry = sums.setdefault((run, rank), [0, 0.0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += measured
        entry[2] += replay
        entry[3] += predicted
    return [(run, rank, n, round(m, 3), round(r, 3), round(p, 3), round(r / p, 4) if p > 0 else float("inf"))
            for (run, rank), (n, m, r, p) in sorted(sums.items(), key=lambda item: (str(item[0][0]), item[0][1]))]


def event_categories(con) -> set[str]:
    """The categories a --scale selector may name: each event's, and its modern name (a
    PyTorch 1.8-1.9 trace's Operator rows answer to cpu_op and user_annotation too); mapped
    once per distinct (category, name) pair."""
    return {row[0] for row in con.execute(
        "SELECT DISTINCT unnest([cat, kineto_category(cat, name)]) "
        "FROM (SELECT cat, name FROM events WHERE cat IS NOT NULL GROUP BY cat, name)").fetchall()}


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
    params = {"run_id": run_id_or_all(con, run), "rank": rank, "step": step,
              "all_ranks": bool(coupled and rank is not None), "coupled": bool(coupled),
              "queue_wait_us": QUEUE_WAIT_US, "queue_share": QUEUE_SHARE}
    results = []
    # the scenarios' stages write comm_model too: one transaction keeps all or nothing
    with transaction(con):
        stages.run_stages(con, "whatif", SCOPE, params, "what-if stage")
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
                                        hotspots=_hotspots(path, top), path=path))
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
    windows: dict           # window_index -> (run_id, rank, step, measured_us, predicted_us, start_us)
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
        "min_wait_us": MIN_WAIT_US, "handoff_us": HANDOFF_US, "drop_syncs": bool(scenario.drop_syncs),
    }
    stages.run_stages(con, "whatif", PREPARE, values, "what-if stage")


def execute_stage(con, name: str, values: dict) -> None:
    """Run the statements of the SQL file `name` (under ctda_sql.sql) with its parameters from
    `values`; a failing statement is a CtdaError naming the file (core.stages.run_stage)."""
    stages.run_stage(con, name, values, "what-if stage")


def _replay(con, params: dict, scenario: Scenario) -> _Replay:
    _prepare(con, params, scenario)
    if hasattr(scenario, "apply"):  # whatif --cluster: collectives take their simulated time
        scenario.apply(con)
    nodes = con.execute("SELECT * FROM wi_replay_nodes ORDER BY window_index, seq").fetchnumpy()
    edges = con.execute("SELECT * FROM wi_replay_edges ORDER BY dst_seq").fetchnumpy()
    windows = con.execute("SELECT * FROM wi_replay_windows ORDER BY window_index").fetchnumpy()
    if len(windows["window_index"]) == 0:
        return _Replay({}, nodes, np.empty(0), np.empty(0), {})
    first = first_rows(nodes["window_index"], len(windows["window_index"]))
    graph = Graph(nodes, edges, windows, first)
    chain = WindowChain(con.execute("SELECT * FROM wi_window_origins ORDER BY window_index").fetchnumpy())
    carry = StreamCarry.build(graph, nodes, chain)
    coupling = Coupling.load(con, graph, chain)
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
    return _with_starts(_finish(graph, windows, nodes, start, source), chain, graph.window_lengths(start), windows)



def _finish(graph: Graph, windows, nodes, start, best_source) -> _Replay:
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


def _with_starts(replayed: _Replay, chain: WindowChain, lengths: np.ndarray, windows) -> _Replay:
    """The replay with each reported window's start (_window_starts) after its length."""
    starts = _window_starts(chain, lengths, np.asarray(windows["run_id"]))
    position = {int(index): i for i, index in enumerate(windows["window_index"])}
    replayed.windows = {window: (*row, float(starts[position[window]])) for window, row in replayed.windows.items()}
    return replayed


def _window_starts(chain: WindowChain, lengths: np.ndarray, run_ids: np.ndarray) -> np.ndarray:
    """Where each window starts in the replay (its rank's earlier windows as replayed, plus the
    measured gaps), from its run's earliest measured window start: the same origin in every
    replay of the windows, since a rank's first window keeps its measured start."""
    origin = chain.origins(lengths)
    earliest = {run: chain.origin0[run_ids == run].min() for run in np.unique(run_ids)}
    return origin - np.array([earliest[run] for run in run_ids.tolist()], dtype=float)


def _shown_end(nodes, first, start, end) -> np.ndarray:
    """Where each node ends in the path's rows: a CPU node that ends in a blocking sync keeps its
    measured wait in its duration, but the replay lets what follows it go when the GPU work
    is done, so it is shown ending where the next node on its thread starts."""
    shown = end.copy()
    rows = np.flatnonzero(np.asarray(nodes["ends_with_sync"], dtype=bool))
    following = column(nodes, "next_on_lane_seq", -1.0)[rows].astype(np.int64)
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
    for window, (run_id, rank, step, measured, replay, replay_start) in baseline.windows.items():
        after, after_start = predicted.windows[window][4:6]
        rows.append((run_id, rank, step, round(measured, 3), round(replay, 3), round(after, 3),
                     round(replay / after, 4) if after > 0 else float("inf"),
                     round(replay_start, 3), round(replay_start + replay, 3),
                     round(after_start, 3), round(after_start + after, 3)))
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
        ["run_id", "rank", "step", "measured_us", "replay_us", "predicted_us", "speedup",
         "replay_start_us", "replay_end_us", "predicted_start_us", "predicted_end_us"])})
    path_schema = pa.schema([("run_id", pa.int32()), ("rank", pa.int32()), ("step", pa.int64()),
                             ("seq", pa.int64()), ("node_id", pa.int64()), ("kind", pa.string()),
                             ("label", pa.string()), ("measured_us", pa.float64()), ("predicted_us", pa.float64()),
                             ("node_rank", pa.int32()), ("node_step", pa.int64())])
    path_table = pa.table({name: [r[i] for r in path] for i, name in enumerate(path_schema.names)},
                          schema=path_schema)
    con.register("wi_result_steps", step_table)
    con.register("wi_result_path", path_table)
    try:
        stages.run_stage(con, "whatif/50_persist.sql", {"scenario": scenario, "changes": changes}, "what-if stage")
    finally:
        con.unregister("wi_result_steps")
        con.unregister("wi_result_path")
