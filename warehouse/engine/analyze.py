"""`ctda-sql analyze`: build the dependency graphs and critical paths of every window
(ProfilerStep, or annotation by prefix) of every rank at once, with set-based SQL stages
in sql/analysis/*.sql. Everything is written in one transaction."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from ctda_sql.core import sqlfiles, stages
from ctda_sql.core.errors import CtdaError
from ctda_sql.core.progress import progress_bar
from ctda_sql.core.runs import run_id_of
from ctda_sql.core.transaction import transaction
from ctda_sql.engine import crossrank

METHODS = ("ctda", "per_thread", crossrank.METHOD)
# run in the order their contracts ask (core.stages.ordered)
STAGES = (
    "10_cpu_events.sql", "20_cpu_nodes.sql", "30_gpu_nodes.sql", "40_edges.sql",
    "50_path.sql", "60_counted.sql", "70_persist.sql",
)


@dataclass(frozen=True)
class AnalysisSettings:
    # a sync call may return this long after the GPU work it waited for ended (clock skew)
    sync_tolerance_us: float = 20.0
    # an op that sat past its launch and its stream predecessor waited for an op on another
    # stream that ended within a tenth of that wait before it started (at least 15 us, at most
    # 100 us): docs/method.md has the measured hand-offs and chance rates. A number here
    # (`--wait-gap-us`) makes the tolerance that number whatever the wait.
    wait_gap_us: float | None = None
    wait_gap_floor_us: float = 15.0
    wait_gap_max_us: float = 100.0
    wait_gap_ratio: float = 0.1
    # a device op queued on an idle stream longer than this, with no wait found for it, idled
    # for a cause the trace does not show (ordinary gaps between queued ops: p99 <= 17 us)
    queue_idle_min_us: float = 100.0
    # a thread idle over a gloo execution's end that resumes within 15 % of its idle time (at
    # least 1 ms) of that end waited for it: on loaded CPUs the two threads' records drift apart
    # by milliseconds either way (docs/method.md)
    comm_resume_us: float = 1000.0
    comm_resume_ratio: float = 0.15
    # split GPU nodes where the stream went idle waiting for the next launch
    split_starved: bool = True
    starve_gap_us: float = 1.0


def analysis_settings(wait_gap_us: float | None = None, split_starved: bool = True,
                      wait_gap_option: str = "wait_gap_us") -> AnalysisSettings:
    """The settings a user chose, checked once for the CLI, the shell and the Python API;
    wait_gap_option names the option as the caller's user wrote it (--wait-gap-us or
    wait_gap_us) in the one-line error."""
    if wait_gap_us is not None and not 0 <= wait_gap_us < float("inf"):  # NaN fails both comparisons
        raise CtdaError(f"{wait_gap_option} must be a finite number, 0 or more, got {wait_gap_us:g}")
    return AnalysisSettings(wait_gap_us=None if wait_gap_us is None else float(wait_gap_us),
                            split_starved=split_starved)


def resolve_methods(method: str | list[str]) -> list[str]:
    """'all', one method's name, or a list of names (a lake task's share of the methods)."""
    if method == "all":
        return list(METHODS)
    names = [method] if isinstance(method, str) else list(method)
    for name in names:
        if name not in METHODS:
            raise CtdaError(f"unknown method {name!r}; choose ctda, per_thread, cross_rank or all")
    return names


def run_id_or_all(con, run: str | None) -> int | None:
    """The run_id of `run` (core.runs.run_id_of's lookup and error); None for every run."""
    return None if run is None else run_id_of(con, run)[0]


def analyze(
    con: duckdb.DuckDBPyConnection,
    run: str | None = None,
    method: str | list[str] = "all",
    window_prefix: str | None = None,
    show_progress: bool = True,
    settings: AnalysisSettings = AnalysisSettings(),
) -> str:
    """Materialize nodes, edges and critical_path; returns a one-paragraph summary."""
    methods = resolve_methods(method)
    run_id = run_id_or_all(con, run)
    with transaction(con):
        counts = run_stages(con, run_id, methods, window_prefix, show_progress, settings)
        summary = summary_text(counts) + crossrank.analyze_cross_rank(con, run_id, methods)
    return summary


def run_stages(con: duckdb.DuckDBPyConnection, run_id: int | None, methods: list[str],
               window_prefix: str | None = None, show_progress: bool = False,
               settings: AnalysisSettings = AnalysisSettings()) -> dict:
    """The per-rank engine's stages, in the caller's transaction; returns the summary's
    figures (analysis_counts), windows 0 when nothing matched."""
    params = {
        "run_id": run_id, "window_prefix": window_prefix, "methods": crossrank.per_rank_methods(methods),
        "sync_tolerance_us": settings.sync_tolerance_us, **wait_gap_params(settings),
        "queue_idle_min_us": settings.queue_idle_min_us, "comm_resume_us": settings.comm_resume_us,
        "comm_resume_ratio": settings.comm_resume_ratio,
        "split_starved": settings.split_starved, "starve_gap_us": settings.starve_gap_us,
    }
    stages.run_stage(con, "analysis/seed_phase_rules.sql", {}, "analysis stage")
    with progress_bar("analyzing", len(STAGES), show_progress) as advance:
        stages.run_stages(con, "analysis", STAGES, params, "analysis stage", after_each=advance)
    return analysis_counts(con)


def wait_gap_params(settings: AnalysisSettings) -> dict:
    """The hand-off tolerance's parameters: adaptive by default, fixed with --wait-gap-us."""
    if settings.wait_gap_us is not None:
        fixed = settings.wait_gap_us
        return {"wait_gap_us": fixed, "wait_gap_max_us": fixed, "wait_gap_ratio": 0.0}
    return {"wait_gap_us": settings.wait_gap_floor_us, "wait_gap_max_us": settings.wait_gap_max_us,
            "wait_gap_ratio": settings.wait_gap_ratio}


NO_WINDOWS = "nothing to analyze: no steps or windows matched (ingest traces first)"


def analysis_counts(con) -> dict:
    """The summary's figures (sql/analysis/summary.sql) from the tables the stages just made:
    windows, ranks, nodes, nested, and paths (per method: cpcr_sum over its windows)."""
    cursor = con.execute(sqlfiles.load("analysis/summary.sql"))
    names = [d[0] for d in cursor.description]
    return dict(zip(names, cursor.fetchall()[0]))


def added_counts(counts: list[dict]) -> dict:
    """The figures of analyses of disjoint windows (a lake's rank tasks) as one analysis's."""
    totals: dict[str, dict] = {}
    for path in (path for c in counts for path in c["paths"]):
        total = totals.setdefault(path["method"], {"method": path["method"], "cpcr_sum": 0.0, "windows": 0})
        total["cpcr_sum"] += path["cpcr_sum"]
        total["windows"] += path["windows"]
    added = {key: sum(c[key] for c in counts) for key in ("windows", "ranks", "nodes", "nested")}
    return {**added, "paths": list(totals.values())}


def summary_text(counts: dict) -> str:
    """The lines `ctda-sql analyze` prints for the figures of analysis_counts."""
    if counts["windows"] == 0:
        raise CtdaError(NO_WINDOWS)
    lines = [f"analyzed {counts['windows']} windows of {counts['ranks']} rank(s): {counts['nodes']:,} nodes"]
    if counts["nested"]:
        lines.append(f"  warning: {counts['nested']} annotation(s) nested in another of the same prefix were not "
                     "windows of their own; each is analysed inside its outermost annotation")
    for path in sorted(counts["paths"], key=lambda p: p["method"]):
        lines.append(f"  {path['method']}: mean CPCR {path['cpcr_sum'] / path['windows']:.3f}")
    return "\n".join(lines)
