"""The causal profile of `advise` (as Coz does for programs): for each of the path's largest
regions, the replay's saving at half and at zero time, and per step its path time beside the
saving at zero, with the slack between them named where they disagree (docs/method.md, "Path
time and saving at zero"). Also the job-step savings that advise's findings share."""

from __future__ import annotations

import math
from statistics import median

import pyarrow as pa

from ctda_sql.core import stages
from ctda_sql.whatif.changes import Scale, Scenario

PROFILE_FACTORS = (0.5, 0.0)
# advice_profile.per_step: a region's path time beside its saving at zero, step by step
PER_STEP_TYPE = pa.struct([("step", pa.int64()), ("rank", pa.int32()), ("path_us", pa.float64()),
                           ("saving_at_zero_us", pa.float64()), ("overlap_us", pa.float64()),
                           ("reason", pa.string())])


def profile_regions(con, count: int, params: dict) -> list[dict]:
    """The path's largest regions to profile, at most `count` (20_profile_regions.sql)."""
    stages.run_stage(con, "advice/20_profile_regions.sql", {**params, "top": count}, "advice stage")
    cursor = con.execute("SELECT * FROM _adv_profile_regions ORDER BY place")
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def region_scenario(region: dict, factor: float) -> Scenario:
    """The what-if that scales `region` by `factor` (on its rank only, where it is one rank's)."""
    ranks = (int(region["rank"]),) if region["rank"] is not None else None
    return Scenario(scales=(Scale(_glob_literal(region["label"]), factor, region["category"], ranks),))


def _glob_literal(name: str) -> str:
    """A glob that matches `name` itself: `[` would open a class (`*` and `?` still match
    themselves, with others beside)."""
    return name.replace("[", "?")


# ---- the job's step in the replay (the findings' savings use it too) ---------------------------

def job_steps(step_rows: list[tuple], rank: int | None) -> tuple[dict, dict, dict]:
    """Per step: the measured, replayed and predicted job step (the slowest rank's, or `rank`'s)."""
    measured, replayed, predicted = {}, {}, {}
    for row_rank, step, measured_us, replay_us, predicted_us in (row[1:6] for row in step_rows):
        if rank is not None and row_rank != rank:
            continue
        measured[step] = max(measured.get(step, 0.0), measured_us)
        replayed[step] = max(replayed.get(step, 0.0), replay_us)
        predicted[step] = max(predicted.get(step, 0.0), predicted_us)
    return measured, replayed, predicted


def median_saving(baseline: dict, predicted: dict) -> float | None:
    """The median over steps of baseline - predicted (steps the replay could not predict left out)."""
    savings = [baseline[s] - predicted[s] for s in baseline if s in predicted and math.isfinite(predicted[s])]
    return median(savings) if savings else None


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


def profile_documents(con, run_id: int, regions: list[dict], results: list, rank: int | None) -> list[dict]:
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
        at_half = median_saving(*job_steps(results[2 * i].steps, rank)[1:])
        at_zero = median_saving(*job_steps(results[2 * i + 1].steps, rank)[1:])
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
    with the ranks and lengths the reasons name. The path time is the region's on the path of
    the rank whose path holds most of it or, where the step has several ranks and the job's
    cross-rank path holds more of the region (the replay removes it on every rank that path
    crosses), on that path. Each is a path the job's step runs through, and either may miss
    some of it: the cross-rank path ends where it meets a step's start."""
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
                    "saving_at_zero_us": saving, "overlap_us": overlap_us,
                    "ahead_rank": current and current["rank"], "step_us": replayed, "job_rank": job_rank,
                    "job_us": predicted, "rank_us": by_window[(path_rank, step)][5],
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
    if current["start_us"] >= previous["start_us"] or not (
            math.isfinite(current["predicted_end_us"]) and math.isfinite(previous["predicted_end_us"])):
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
                "rank": region["rank"], "path_us": rounded(region["path_us"]),
                "saving_at_half_us": rounded(at_half), "saving_at_zero_us": rounded(at_zero),
                "per_step": [{"step": row["step"], "rank": row["rank"], "path_us": rounded(row["path_us"]),
                              "saving_at_zero_us": rounded(row["saving_at_zero_us"]),
                              "overlap_us": rounded(row["overlap_us"]), "reason": row["reason"]}
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
    at_zero, path = rounded(at_zero), rounded(region["path_us"])
    step_us = median(row["step_us"] for row in per_step) if per_step else 0.0
    if at_zero >= UNDER_SHARE * path and at_zero <= saving_limit_us(path, step_us):
        return None
    named = [row for row in per_step if row["reason"]]
    if named:
        worst = max(named, key=lambda row: abs(row["path_us"] - row["saving_at_zero_us"]))
        return f"{len(named)} of {len(per_step)} steps disagree; step {worst['step']}: {worst['reason']}"
    return (f"the path time is a mean over the {region['windows']} windows that hold the region, the saving a "
            f"median over every step; step by step they agree (per_step)")


def rounded(value: float | None) -> float | None:
    """A document's microseconds: to the nanosecond."""
    return None if value is None else round(float(value), 3)
