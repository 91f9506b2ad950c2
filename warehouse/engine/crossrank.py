"""The cross-rank analysis (`analyze --method cross_rank`, part of `all`): collective matching
(`collective_instances`), clock offsets (`traces.clock_offset_us`) and the cross-rank
critical path, with set-based SQL stages in sql/crossrank/*.sql.

It runs inside `analyze`'s transaction, after the per-rank stages: the path is built from the
per-rank `ctda` paths just written, so asking for cross_rank also builds ctda."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from ctda_sql.core import stages

METHOD = "cross_rank"
MATCH_STAGES = ("10_instances.sql", "20_match.sql")
PATH_STAGES = ("30_path.sql",)


@dataclass(frozen=True)
class CrossRankSettings:
    # a rank waited for another at a collective only when the other arrived this much later
    gate_min_wait_us: float = 50.0
    # a blocked CPU thread resumes within this long of the collective's end
    resume_tolerance_us: float = 1000.0
    # a matched pair is refused when a rank ended it more than this before another arrived;
    # a send that did (buffered) is kept, but waited for nothing (wait_us 0, no gate)
    causality_tolerance_us: float = 1.0


def per_rank_methods(methods: list[str]) -> list[str]:
    """The per-rank methods `analyze` must build for `methods`: cross_rank needs ctda."""
    needed = [m for m in methods if m != METHOD]
    if METHOD in methods and "ctda" not in needed:
        needed.insert(0, "ctda")
    return needed


def analyze_cross_rank(con: duckdb.DuckDBPyConnection, run_id: int | None, methods: list[str],
                       settings: CrossRankSettings = CrossRankSettings()) -> str:
    """Match collectives, estimate clock offsets and build the cross-rank path when `methods`
    asks for it; returns summary lines ('' when not asked)."""
    if METHOD not in methods:
        return ""
    params = {"run_id": run_id, "gate_min_wait_us": settings.gate_min_wait_us,
              "resume_tolerance_us": settings.resume_tolerance_us,
              "causality_tolerance_us": settings.causality_tolerance_us}
    stages.run_stages(con, "crossrank", MATCH_STAGES + PATH_STAGES, params, "cross-rank stage")
    return _summary(con)


def match_collectives(con: duckdb.DuckDBPyConnection, run_id: int | None = None,
                      settings: CrossRankSettings = CrossRankSettings()) -> None:
    """Only the matching and clock offsets (no path): collective_instances and traces."""
    params = {"run_id": run_id, "causality_tolerance_us": settings.causality_tolerance_us}
    stages.run_stages(con, "crossrank", MATCH_STAGES, params, "cross-rank stage")


def _summary(con) -> str:
    instances, matched, runs = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE matched), count(DISTINCT run_id) FROM collective_instances "
        "WHERE run_id IN (SELECT run_id FROM cr_runs)").fetchone()
    line = f"\n  cross_rank: {matched}/{instances} collective instances matched"
    cpcr = con.execute(
        "SELECT avg(p.path_us / w.window_us), count(*) FROM "
        "(SELECT run_id, rank, step, sum(counted_us) AS path_us FROM critical_path "
        " WHERE method = 'cross_rank' AND run_id IN (SELECT run_id FROM cr_runs) GROUP BY ALL) AS p "
        "JOIN analysis_windows AS w USING (run_id, rank, step)").fetchone()
    if cpcr[1]:
        line += f"; mean CPCR {cpcr[0]:.3f} over {cpcr[1]} steps"
    notes = con.execute("SELECT note FROM cr_notes ORDER BY run").fetchall()
    return line + "".join(f"\n  note: {note}" for (note,) in notes)
