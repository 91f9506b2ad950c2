"""`advise`: what to fix first, and what it buys.

Each rule is one SQL file in sql/advice/rules/ that finds its pattern on the critical path, with
its evidence and the what-if scenario that removes or shrinks it (FINDING_COLUMNS). Every
finding's saving is the replay's (warehouse/whatif/replay.py): the median over the analysed
steps of (replayed step - step predicted under the scenario), of the job's step for a
multi-rank run (the slowest rank's). The causal profile asks the same replay what each of the
path's largest regions would buy at half and at zero time. All scenarios share one selection
of windows and one unchanged replay (whatif_many), and nothing is stored."""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

import pyarrow as pa

from ctda_sql.core import sqlfiles, stages
from ctda_sql.core.errors import CtdaError
from ctda_sql.core.runs import run_id_of
from ctda_sql.core.transaction import transaction
from ctda_sql.whatif.changes import Scale, Scenario
from ctda_sql.whatif.replay import whatif_many

FINDING_COLUMNS = ("rule", "title", "fix", "path_us", "windows", "ranks", "occurrences", "top_events",
                   "scale_names", "scale_categories", "scale_factors", "scale_ranks", "bandwidth_scale",
                   "drop_syncs", "not_replayable", "detail")
PROFILE_FACTORS = (0.5, 0.0)
# advice_profile.per_step: a region's path time beside its saving at zero, step by step
PER_STEP_TYPE = pa.struct([("step", pa.int64()), ("rank", pa.int32()), ("path_us", pa.float64()),
                           ("saving_at_zero_us", pa.float64()), ("reason", pa.string())])
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
    regions = _profile_regions(con, profile_top, params)
    finding_scenarios = [f.scenario for f in findings if f.scenario is not None]
    region_scenarios = [_region_scenario(region, factor) for region in regions for factor in PROFILE_FACTORS]
    scenarios = finding_scenarios + region_scenarios
    results = whatif_many(con, [(None, s) for s in scenarios], run=run_name, step=step,
                          persist=False, top=0, progress=progress) if scenarios else []
    measured = _job_steps(results[0].steps, rank)[0] if results else _measured_steps(con, params)
    savings = iter(_median_saving(*_job_steps(r.steps, rank)[1:]) for r in results[:len(finding_scenarios)])
    out_findings = [_finding_document(f, next(savings) if f.scenario is not None else None, measured)
                    for f in findings]
    profile = _profile_documents(con, run_id, regions, results[len(finding_scenarios):], rank)
    out_findings.sort(key=lambda f: (-(f["saving_us"] if f["saving_us"] is not None else -1), f["rule"]))
    return {"run": run_name, "run_id": run_id, "step_us": _round(median(measured.values())) if measured else None,
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


def _profile_regions(con, count: int, params: dict) -> list[dict]:
    stages.run_stage(con, "advice/20_profile_regions.sql", {**params, "top": count}, "advice stage")
    cursor = con.execute("SELECT * FROM _adv_profile_regions ORDER BY place")
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def _region_scenario(region: dict, factor: float) -> Scenario:
    ranks = (int(region["rank"]),) if region["rank"] is not None else None
    return Scenario(scales=(Scale(_glob_literal(region["label"]), factor, region["category"], ranks),))


def _glob_literal(name: str) -> str:
    """A glob that matches `name` itself: `[` would open a class (`*` and `?` still match
    themselves, with others beside)."""
    return name.replace("[", "?")


def _job_steps(step_rows: list[tuple], rank: int | None) -> tuple[dict, dict, dict]:
    """Per step: the measured, replayed and predicted job step (the slowest rank's, or `rank`'s)."""
    measured, replayed, predicted = {}, {}, {}
    for row_rank, step, measured_us, replay_us, predicted_us in (row[1:6] for row in step_rows):
        if rank is not None and row_rank != rank:
            continue
        measured[step] = max(measured.get(step, 0.0), measured_us)
        replayed[step] = max(replayed.get(step, 0.0), replay_us)
        predicted[step] = max(predicted.get(step, 0.0), predicted_us)
    return measured, replayed, predicted


def _measured_steps(con, params: dict) -> dict:
    """Per step, the job's measured step, when no scenario was replayed."""
    rows = con.execute("SELECT step, max(window_us) FROM analysis_windows WHERE run_id = $run_id "
                       "AND ($rank IS NULL OR rank = $rank) AND ($step IS NULL OR step = $step) GROUP BY step",
                       params).fetchall()
    return dict(rows)


def _median_saving(baseline: dict, predicted: dict) -> float | None:
    savings = [baseline[s] - predicted[s] for s in baseline if s in predicted and math.isfinite(predicted[s])]
    return median(savings) if savings else None


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
            "saving_us": _round(saving),
            "saving_share": round(saving / step_us, 4) if saving is not None and step_us else None,
            "path_us": _round(per_step_us), "path_share": round(per_step_us / step_us, 4) if step_us else None,
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


# ---- the causal profile: path time beside the saving at zero, step by step ------------------

# The path time and the saving at zero of a region in one step agree when the saving is at least
# UNDER_SHARE of the path time and at most OVER_SHARE above it (+ OVER_US); elsewhere the slack
# between them is named (docs/method.md, "Path time and saving at zero").
UNDER_SHARE = 0.5
# an op's counted path time is its inclusive time clipped to the path's windows, while the replay
# removes the whole event, its edges' launch and return slivers too: on the shared traces that
# adds up to 2.4% at most where nothing else differs (docs/method.md). OVER_STEP_SHARE of the step:
# a tenth of the replay's smallest error against measured runs (0.7%), below which the two cannot
# be told apart (backward_thread: 0.08 ms of a 413 ms step, docs/method.md)
OVER_SHARE, OVER_US, OVER_STEP_SHARE = 0.05, 1.0, 0.001


def saving_limit_us(path_us: float, step_us: float) -> float:
    """The largest saving at zero that agrees with `path_us` of path time in a step of `step_us`."""
    return path_us * (1 + OVER_SHARE) + OVER_US + OVER_STEP_SHARE * max(step_us, 0.0)


def _profile_documents(con, run_id: int, regions: list[dict], results: list, rank: int | None) -> list[dict]:
    """Each region's document: its path time and the replay's savings (medians over steps, as
    DESIGN.md has them) and, per step, the path time beside the saving at zero, with the slack
    that parts them named where they disagree. `results` are each region's replays at
    PROFILE_FACTORS, in order."""
    windows, job_paths = _region_windows(con)
    steps = [_region_steps(windows.get(region["place"], {}), results[2 * i + 1], rank,
                           job_paths.get(region["place"], {}))
             for i, region in enumerate(regions)]
    for rows in steps:  # a rank's windows replay in a chain: a saving may move between steps
        run_totals = (sum(r["path_us"] for r in rows), sum(r["saving_at_zero_us"] or 0.0 for r in rows),
                      sum(r["step_us"] for r in rows))
        for row in rows:
            row["run_path_us"], row["run_saving_us"], row["run_step_us"] = run_totals
    slack = _slack(con, run_id, regions, results, steps)
    documents = []
    for i, region in enumerate(regions):
        at_half = _median_saving(*_job_steps(results[2 * i].steps, rank)[1:])
        at_zero = _median_saving(*_job_steps(results[2 * i + 1].steps, rank)[1:])
        per_step = [{**row, "reason": _reason(row, slack.get((region["place"], row["step"])))} for row in steps[i]]
        documents.append(_profile_document(region, at_half, at_zero, per_step))
    return documents


def _region_windows(con) -> tuple[dict, dict]:
    """Each profiled region's counted path time per window of a rank, {place: {(rank, step):
    path_us}}, and per step on the job's cross-rank path, {place: {step: path_us}}."""
    join = ("JOIN _adv_profile_regions AS p ON p.kind = w.kind AND p.label = w.label "
            "AND p.rank IS NOT DISTINCT FROM w.rank_scope")
    windows: dict = {}
    for place, rank, step, path_us in con.execute(
            f"SELECT p.place, w.rank, w.step, w.path_us FROM _adv_region_windows AS w {join}").fetchall():
        windows.setdefault(place, {})[(rank, step)] = path_us
    job_paths: dict = {}
    for place, step, path_us in con.execute(
            f"SELECT p.place, w.step, w.path_us FROM _adv_region_job_steps AS w {join}").fetchall():
        job_paths.setdefault(place, {})[step] = path_us
    return windows, job_paths


def _region_steps(path_by_window: dict, at_zero, rank: int | None, job_path: dict) -> list[dict]:
    """Per step of the job: the region's path time, and the saving at zero of the job's step
    (the slowest rank's; of its own part where that rank ran a whole step ahead, _own_part),
    with the ranks and lengths the reasons name. The path time is the
    region's on the path of the rank whose path holds most of it or, where the step has several
    ranks and the job's cross-rank path holds more of the region (the replay removes it on
    every rank that path crosses), on that path. Each is a path the job's step runs through,
    and either may miss some of it: the cross-rank path ends where it meets a step's start."""
    by_window = {(row[1], row[2]): row for row in at_zero.steps if rank is None or row[1] == rank}
    out = []
    previous: dict | None = None
    for step in sorted({s for _, s in by_window}):
        ranks = sorted(r for r, s in by_window if s == step)
        windows = [by_window[(r, step)] for r in ranks]
        replayed = max(window[4] for window in windows)
        job_rank = max(ranks, key=lambda r: (by_window[(r, step)][5], -r))
        path_rank = max(ranks, key=lambda r: (path_by_window.get((r, step), 0.0), -r))
        predicted = by_window[(job_rank, step)][5]
        current = _job_step_times(windows)
        overlap_us, saving = _own_part(current, previous)
        if saving is None:
            saving = replayed - predicted if math.isfinite(predicted) else None
        previous = current
        rank_path_us = path_by_window.get((path_rank, step), 0.0)
        # (with `rank`, by_window holds that rank's windows only)
        across = len(ranks) > 1 and job_path.get(step, 0.0) > rank_path_us
        out.append({"step": step, "rank": path_rank, "across_ranks": across,
                    "path_us": job_path[step] if across else rank_path_us,
                    "saving_at_zero_us": saving, "overlap_us": overlap_us, "ahead_rank": current and current["rank"],
                    "step_us": replayed,
                    "job_rank": job_rank, "job_us": predicted, "rank_us": by_window[(path_rank, step)][5],
                    "on_ranks": {r: path_by_window[(r, step)] for r in ranks if path_by_window.get((r, step))}})
    return out


def _job_step_times(windows: list[tuple]) -> dict | None:
    """A job step's rank (the longest window, as the job's step time is) and where that window
    starts, and where the job's step ends (its last rank's end), in the unchanged replay and
    with the change; None where the replay gave no times."""
    if any(None in window[7:11] for window in windows):
        return None
    longest = max(windows, key=lambda window: (window[4], -window[1]))
    return {"rank": longest[1], "start_us": longest[7], "end_us": max(window[8] for window in windows),
            "predicted_end_us": max(window[10] for window in windows)}


def _own_part(current: dict | None, previous: dict | None) -> tuple[float, float | None]:
    """Where the job's step is a window of a rank that ran a whole step ahead (it began before
    the previous step's window, another rank's: a pipeline stage that sent ahead and waits for
    the other stage's earlier step), the time it shares with the previous step, and the saving
    of the step's own part: from the previous step's end to its own, in the unchanged replay and
    with the change. The previous step's path counts that time, and a moment counts in one step.
    (0.0, None) elsewhere: the saving is the whole window's (ranks whose step boundaries are
    apart by part of a step each count their own window)."""
    if current is None or previous is None or current["rank"] == previous["rank"]:
        return 0.0, None
    if current["start_us"] >= previous["start_us"] or not math.isfinite(current["predicted_end_us"]):
        return 0.0, None
    own_measured = current["end_us"] - previous["end_us"]
    own_predicted = current["predicted_end_us"] - previous["predicted_end_us"]
    return previous["end_us"] - current["start_us"], own_measured - own_predicted


def _disagreement(row: dict) -> str | None:
    """'under' where the saving at zero is under UNDER_SHARE of the path time, 'over' where it
    passes the path time by more than the tolerance, else None."""
    saving, path = row["saving_at_zero_us"], row["path_us"]
    if saving is None:
        return None
    if saving < UNDER_SHARE * path:
        return "under"
    return "over" if saving > saving_limit_us(path, row["step_us"]) else None


def _slack(con, run_id: int, regions: list[dict], results: list, steps: list[list[dict]]) -> dict:
    """What the replayed path of the job's step holds off the counted path, where the saving at
    zero and the path time disagree: {(place, step): _adv_slack's row} (60_profile_slack.sql).
    Sets on each such step row `through`, the replayed path's time by rank, `gap_us`, its time
    between nodes (when it stays on one rank: ranks' windows have their own origins), and
    `outside`, why the region's own collective in the step has no partner in the trace."""
    places, step_of, node_ranks, node_steps, node_ids, durations = [], [], [], [], [], []
    for i, region in enumerate(regions):
        wanted = {(row["job_rank"], row["step"]): row for row in steps[i] if _disagreement(row)}
        for row in wanted.values():
            row["through"] = {}
        for (_run, rank, step, _seq, node_id, _kind, _label, _measured, predicted, node_rank,
             node_step) in results[2 * i + 1].path:
            row = wanted.get((rank, step))
            if row is None:
                continue
            row["through"][node_rank] = row["through"].get(node_rank, 0.0) + predicted
            places.append(region["place"]), step_of.append(step), node_ranks.append(node_rank)
            node_steps.append(node_step), node_ids.append(node_id), durations.append(predicted)
        for row in wanted.values():
            one_rank = set(row["through"]) <= {row["job_rank"]}
            row["gap_us"] = row["job_us"] - sum(row["through"].values()) if one_rank else 0.0
    if not any(_disagreement(row) for rows in steps for row in rows):
        return {}
    path = pa.table({"place": pa.array(places, pa.int64()), "step": pa.array(step_of, pa.int64()),
                     "node_rank": pa.array(node_ranks, pa.int32()), "node_step": pa.array(node_steps, pa.int64()),
                     "node_id": pa.array(node_ids, pa.int64()), "predicted_us": pa.array(durations, pa.float64())})
    con.register("_adv_replayed_path", path)
    try:
        stages.run_stage(con, "advice/60_profile_slack.sql", {"run_id": run_id}, "advice stage")
    finally:
        con.unregister("_adv_replayed_path")
    cursor = con.execute("SELECT * FROM _adv_slack")
    columns = [d[0] for d in cursor.description]
    slack = {(row[0], row[1]): dict(zip(columns, row)) for row in cursor.fetchall()}
    outside = {(r, s, name): why for r, s, name, why in con.execute("SELECT * FROM _adv_unpartnered").fetchall()}
    for i, region in enumerate(regions):
        for row in steps[i]:
            row["outside"] = outside.get((row["rank"], row["step"], region["label"]))
    return slack


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


def _reason(row: dict, slack: dict | None) -> str | None:
    """Why the step's saving at zero and path time disagree, from the replay of the change."""
    reason = _slack_reason(row, slack)
    if reason and row["overlap_us"] > 0:
        reason += (f"; the saving counts from the previous step's end, {_ms(row['overlap_us'])} into rank "
                   f"{row['ahead_rank']}'s window, which began a whole step ahead")
    return reason


def _slack_reason(row: dict, slack: dict | None) -> str | None:
    """The slack between the two: where the replayed path of the change runs off the counted path."""
    kind = _disagreement(row)
    if kind is None:
        return None
    saving, path, job = row["saving_at_zero_us"], row["path_us"], row["job_rank"]
    others = {r: us for r, us in row.get("through", {}).items() if r != job}
    waits = (f"the job's step (rank {job}) waits at collectives for rank{'s' if len(others) > 1 else ''} "
             f"{', '.join(map(str, others))}, whose work holds {_ms(sum(others.values()))} of its replayed path"
             if others else None)
    moved = (f"time moves between steps (a rank's windows replay in a chain): over the run's steps the region "
             f"saves {_ms(row['run_saving_us'])} against {_ms(row['run_path_us'])} of path time"
             if row["run_saving_us"] <= saving_limit_us(row["run_path_us"], row["run_step_us"]) else None)
    if kind == "over":
        more = f"the replay saves {_ms(saving - path)} more than the counted path time"
        if moved:
            return f"{more} of this step: {moved}"
        where = waits or ("it also runs off the counted path (inside its span but outside the counted windows: before "
                          "a sync's wait ended, or on a thread the path left)")
        scope = "on the job's path across ranks" if row.get("across_ranks") else "one rank's"
        return f"{more} ({scope}): {where}; the change removes the region's time there too"
    if saving < 0:
        return (f"the replay makes this step {_ms(-saving)} longer (its path holds {_ms(path)} of the region): "
                + (moved or "a rank's windows replay in a chain, and the change moves work into this step"))
    parts = []
    if job != row["rank"]:
        parts.append(f"a near-critical rank: at zero the job's step is rank {job}'s ({_ms(row['job_us'])}); "
                     f"rank {row['rank']}, whose path holds the region, ends at {_ms(row['rank_us'])}")
    elif waits:
        parts.append(f"a wait on another rank: {waits}")
    gap = max(row.get("gap_us", 0.0), 0.0)
    if row.get("outside") and job == row["rank"]:
        parts.append(f"a wait outside the trace: the region's own collective waits for a partner the trace does not "
                     f"hold ({row['outside']}), and the replay keeps that wait as measured")
    elif slack is not None and slack["lane_us"] >= gap:
        where = (f"{slack['lane']} of rank {slack['lane_rank']} ({_ms(slack['lane_us'])} there off the counted path, "
                 f"most in {slack['top_label']})")
        if slack["outside"]:
            parts.append(f"a wait outside the trace: at zero the path runs through {where}, a collective that waits "
                         f"for a partner the trace does not hold ({slack['outside']})")
        else:
            parts.append(f"a near-critical alternative: at zero the path runs through {where}; that path was only "
                         f"{_ms(saving)} shorter, so {_ms(path - saving)} of the region's {_ms(path)} is slack")
    elif gap > 0 and not parts:
        parts.append(f"a wait the trace does not show: at zero {_ms(gap)} of the job's replayed step lie between "
                     f"its path's nodes, kept as measured (untraced work, or a wait on something outside the trace)")
    if not parts:
        parts.append("the replayed path at zero holds only nodes of the counted path, and the region's counted time "
                     "stays on it")
    return "; ".join(parts)


def _profile_document(region: dict, at_half: float | None, at_zero: float | None, per_step: list[dict]) -> dict:
    document = {"label": region["label"], "kind": region["kind"], "category": region["category"],
                "rank": region["rank"], "path_us": _round(region["path_us"]),
                "saving_at_half_us": _round(at_half), "saving_at_zero_us": _round(at_zero),
                "per_step": [{"step": row["step"], "rank": row["rank"], "path_us": _round(row["path_us"]),
                              "saving_at_zero_us": _round(row["saving_at_zero_us"]),
                              "overlap_us": _round(row["overlap_us"]), "reason": row["reason"]}
                             for row in per_step]}
    note = _note(region, at_zero, per_step)
    if note:
        document["note"] = note
    return document


def _note(region: dict, at_zero: float | None, per_step: list[dict]) -> str | None:
    """The region's note where its saving at zero is under half its path time or above it: the
    reason of its step that disagrees most, or why the medians disagree while the steps agree."""
    if at_zero is None:
        return None
    # as the document shows them: a saving of exactly half the path time, rounded down, is under
    at_zero, path = _round(at_zero), _round(region["path_us"])
    step_us = median(row["step_us"] for row in per_step) if per_step else 0.0
    if at_zero >= UNDER_SHARE * path and at_zero <= saving_limit_us(path, step_us):
        return None
    named = [row for row in per_step if row["reason"]]
    if named:
        worst = max(named, key=lambda row: abs(row["path_us"] - row["saving_at_zero_us"]))
        return f"{len(named)} of {len(per_step)} steps disagree; step {worst['step']}: {worst['reason']}"
    return (f"the path time is a mean over the {region['windows']} windows that hold the region, the saving a "
            f"median over every step; step by step they agree (per_step)")


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


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 3)
