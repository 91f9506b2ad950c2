"""`advise`: what to fix first, and what it buys.

Each rule is one SQL file in sql/advice/rules/ that finds its pattern on the critical path, with
its evidence and the what-if scenario that removes or shrinks it (FINDING_COLUMNS). Every
finding's saving is the replay's (warehouse/whatif/replay.py): the median over the analysed
steps of (replayed step - step predicted under the scenario), of the job's step for a
multi-rank run (the slowest rank's). The causal profile asks the same replay what each of the
path's largest regions would buy at half and at zero time. All scenarios share one selection
of windows and one unchanged replay (whatif_many), and nothing is stored."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

import pyarrow as pa

from ctda_sql.advice.profile import (
    PER_STEP_TYPE,
    PROFILE_FACTORS,
    job_steps,
    median_saving,
    profile_documents,
    profile_regions,
    region_scenario,
    rounded,
)
from ctda_sql.core import sqlfiles, stages
from ctda_sql.core.errors import CtdaError
from ctda_sql.core.runs import run_id_of
from ctda_sql.core.transaction import transaction
from ctda_sql.whatif.changes import Scale, Scenario
from ctda_sql.whatif.replay import whatif_many

FINDING_COLUMNS = ("rule", "title", "fix", "path_us", "windows", "ranks", "occurrences", "top_events",
                   "scale_names", "scale_categories", "scale_factors", "scale_ranks", "bandwidth_scale",
                   "drop_syncs", "not_replayable", "detail")
# a finding whose pattern holds less of the median step than this is left out
MIN_PATH_SHARE = 0.01
# the temp tables the rules read, in order (each file says what it reads and makes)
STAGES = ("advice/10_path_regions.sql", "advice/30_late_ranks.sql")


@dataclass
class Finding:
    rule: str
    title: str
    fix: str
    path_us: float
    windows: int
    ranks: list
    occurrences: int
    top_events: list
    scenario: Scenario | None
    not_replayable: str | None
    detail: str | None

    @classmethod
    def from_row(cls, row: dict) -> Finding:
        scales = tuple(
            Scale(name, float(factor), category or None,
                  tuple(int(r) for r in ranks.split(",")) if ranks else None)
            for name, category, factor, ranks in zip(row["scale_names"] or [], row["scale_categories"] or [],
                                                     row["scale_factors"] or [], row["scale_ranks"] or []))
        scenario = None
        if row["not_replayable"] is None:
            scenario = Scenario(scales=scales, bandwidth_scale=row["bandwidth_scale"] or 1.0,
                                drop_syncs=bool(row["drop_syncs"]))
        return cls(row["rule"], row["title"], row["fix"], float(row["path_us"] or 0.0), int(row["windows"] or 0),
                   list(row["ranks"] or []), int(row["occurrences"] or 0), list(row["top_events"] or []),
                   scenario, row["not_replayable"], row["detail"])


def rule_names() -> list[str]:
    """The rules, by file name (a stable id each)."""
    return [name.removesuffix(".sql") for name in sqlfiles.names("advice/rules")]


def advise(con, run: str | None = None, rank: int | None = None, step: int | None = None,
           top: int = 10, profile_top: int = 10, persist: bool = True,
           progress: Callable[[], None] = lambda: None) -> dict:
    """The findings (ranked by the replay's saving) and the causal profile of one run, as the
    JSON document of DESIGN.md ("Advice and path diff"). With `persist`, also the run's rows of
    advice_findings and advice_profile (replacing its earlier ones), in one transaction."""
    document = _advise(con, run, rank, step, top, profile_top, progress)
    if persist:  # the replays commit their own transaction (comm_model): the rows commit after
        with transaction(con):
            _persist(con, document)
    return document


def _advise(con, run, rank, step, top, profile_top, progress) -> dict:
    if top < 0:
        raise CtdaError("--top must be 0 or more")
    if profile_top < 0:
        raise CtdaError("--profile-top must be 0 or more")
    run_id, run_name = run_id_of(con, run)
    params = {"run_id": run_id, "rank": rank, "step": step}
    _check_analysed(con, params)
    for stage in STAGES:
        stages.run_stage(con, stage, params, "advice stage")
    findings = [f for f in (_find(con, name, params) for name in rule_names()) if f is not None]
    median_step_us = con.execute("SELECT median(window_us) FROM _adv_windows").fetchone()[0] or 0.0
    findings = [f for f in findings if _worth_naming(f, median_step_us)]
    regions = profile_regions(con, profile_top, params)
    finding_scenarios = [f.scenario for f in findings if f.scenario is not None]
    region_scenarios = [region_scenario(region, factor) for region in regions for factor in PROFILE_FACTORS]
    scenarios = finding_scenarios + region_scenarios
    results = whatif_many(con, [(None, s) for s in scenarios], run=run_name, step=step,
                          persist=False, top=0, progress=progress) if scenarios else []
    measured = job_steps(results[0].steps, rank)[0] if results else _measured_steps(con, params)
    savings = iter(median_saving(*job_steps(r.steps, rank)[1:]) for r in results[:len(finding_scenarios)])
    out_findings = [_finding_document(f, next(savings) if f.scenario is not None else None, measured)
                    for f in findings]
    profile = profile_documents(con, run_id, regions, results[len(finding_scenarios):], rank)
    out_findings.sort(key=lambda f: (-(f["saving_us"] if f["saving_us"] is not None else -1), f["rule"]))
    return {"run": run_name, "run_id": run_id, "step_us": rounded(median(measured.values())) if measured else None,
            "steps": len(measured), "findings": out_findings[:top], "profile": profile}


def _persist(con, document: dict) -> None:
    findings = document["findings"]
    finding_table = pa.table({
        "place": pa.array(range(1, len(findings) + 1), pa.int32()),
        **{key: pa.array([f[key] for f in findings], kind) for key, kind in (
            ("rule", pa.string()), ("title", pa.string()), ("fix", pa.string()), ("evidence", pa.string()),
            ("scenario", pa.string()), ("saving_us", pa.float64()), ("saving_share", pa.float64()),
            ("path_us", pa.float64()), ("steps", pa.int64()), ("ranks", pa.list_(pa.int32())))}})
    profile = document["profile"]
    profile_table = pa.table({
        "place": pa.array(range(1, len(profile) + 1), pa.int32()),
        **{key: pa.array([p.get(key) for p in profile], kind) for key, kind in (
            ("kind", pa.string()), ("label", pa.string()), ("rank", pa.int32()), ("path_us", pa.float64()),
            ("saving_at_half_us", pa.float64()), ("saving_at_zero_us", pa.float64()), ("note", pa.string()))},
        "per_step": pa.array([p["per_step"] for p in profile], pa.list_(PER_STEP_TYPE))})
    con.register("_adv_result_findings", finding_table)
    con.register("_adv_result_profile", profile_table)
    try:
        stages.run_stage(con, "advice/50_persist.sql", {"run_id": document["run_id"]}, "advice stage")
    finally:
        con.unregister("_adv_result_findings")
        con.unregister("_adv_result_profile")


def _check_analysed(con, params: dict) -> None:
    windows = con.execute("SELECT count(*) FROM analysis_windows WHERE run_id = $run_id "
                          "AND ($rank IS NULL OR rank = $rank) AND ($step IS NULL OR step = $step)",
                          params).fetchone()[0]
    if not windows:
        raise CtdaError("no analysed steps match; run `ctda-sql analyze` first (method ctda)")


def _find(con, name: str, params: dict) -> Finding | None:
    result = stages.run_stage(con, f"advice/rules/{name}.sql", params, "advice rule", rows=True)
    assert result is not None
    columns, rows = result
    if tuple(columns) != FINDING_COLUMNS:
        raise CtdaError(f"advice rule {name} returns {columns}, not {list(FINDING_COLUMNS)}")
    if not rows or not rows[0][columns.index("path_us")]:
        return None
    return Finding.from_row(dict(zip(columns, rows[0])))


def _worth_naming(finding: Finding, median_step_us: float) -> bool:
    """A pattern that holds under MIN_PATH_SHARE of the median step is not worth a fix."""
    return finding.path_us / max(finding.windows, 1) >= MIN_PATH_SHARE * median_step_us


def _measured_steps(con, params: dict) -> dict:
    """Per step, the job's measured step, when no scenario was replayed."""
    rows = con.execute("SELECT step, max(window_us) FROM analysis_windows WHERE run_id = $run_id "
                       "AND ($rank IS NULL OR rank = $rank) AND ($step IS NULL OR step = $step) GROUP BY step",
                       params).fetchall()
    return dict(rows)


def _finding_document(finding: Finding, saving: float | None, measured: dict) -> dict:
    step_us = median(measured.values()) if measured else 0.0
    per_step_us = finding.path_us / max(finding.windows, 1)  # on the steps (and ranks) that hold it
    evidence = _evidence(finding, per_step_us, step_us)
    if finding.scenario is None:
        evidence += f"; saving not replayed: {finding.not_replayable}"
    elif saving is not None and saving < 0:
        evidence += f"; the replay predicts this change makes the step {-saving:.0f} us longer"
    saving = None if finding.scenario is None or saving is None else max(saving, 0.0)
    return {"rule": finding.rule, "title": finding.title, "fix": finding.fix, "evidence": evidence,
            "scenario": scenario_arguments(finding.scenario) if finding.scenario is not None else None,
            "saving_us": rounded(saving),
            "saving_share": round(saving / step_us, 4) if saving is not None and step_us else None,
            "path_us": rounded(per_step_us), "path_share": round(per_step_us / step_us, 4) if step_us else None,
            "steps": finding.windows, "ranks": finding.ranks, "occurrences": finding.occurrences,
            "top_events": finding.top_events}


def _evidence(finding: Finding, per_step_us: float, step_us: float) -> str:
    ranks = ", ".join(map(str, finding.ranks))
    share = f" ({per_step_us / step_us:.0%} of the median step)" if step_us else ""
    text = (f"{per_step_us / 1000:.2f} ms a step on the critical path{share}, {finding.occurrences} occurrences "
            f"in {finding.windows} steps on rank{'s' if len(finding.ranks) > 1 else ''} {ranks}")
    if finding.top_events:
        text += "; top: " + ", ".join(finding.top_events[:3])
    if finding.detail:
        text += f"; {finding.detail}"
    return text


def scenario_arguments(scenario: Scenario) -> str:
    """The `ctda-sql whatif` arguments that replay `scenario`."""
    words = []
    for s in scenario.scales:
        prefix = f"rank{','.join(map(str, s.ranks))}:" if s.ranks else ""
        category = f"{s.category_glob}:" if s.category_glob else ""
        words += ["--scale", f"{prefix}{category}{s.name_glob}={s.factor:g}"]
    if scenario.bandwidth_scale != 1.0:
        words += ["--comm-bandwidth-scale", f"{scenario.bandwidth_scale:g}"]
    if scenario.drop_syncs:
        words += ["--drop-syncs"]
    return shlex.join(words)
