"""`ctda-sql export html`: one self-contained HTML report of a run, with plotly charts.

plotly, because its figures are built from columns in Python with no server and no
notebook, and `plotly.offline.get_plotlyjs()` gives the whole JavaScript library to inline
(one file, no network when opened); its bar traces take a `base`, which makes the Gantt chart
a plain horizontal bar chart. The data come from the saved `cpcr` report and
sql/export/html_*.sql; this module only shapes columns into figures.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np

from ctda_sql.core import sqlfiles
from ctda_sql.core.errors import CtdaError
from ctda_sql.export.advice_html import advice_sections, late_rank_table
from ctda_sql.export.figures import (
    METHODS,
    composition_figure,
    cpcr_figure,
    cross_rank_path_figure,
    diff_figure,
    gantt_figure,
    hotspots_figure,
    idle_figure,
    kernel_figure,
    mean_cpcr,
    overlap_figure,
    queue_figure,
    shown,
    skew_figure,
    step_time_figure,
    temporal_figure,
    waits_figure,
    whatif_path_figure,
    whatif_steps_figure,
)
from ctda_sql.export.outputfile import atomic_output, check_output_path

HOTSPOTS_PER_PHASE = 5
DIFF_ROWS = 20
WHATIF_CHANGES_PER_SCENARIO = 5

def write_html(con, path: Path, run: str, step: int | None = None, rank: int | None = None,
               compare: str | None = None) -> dict:
    """Write the report of `run`; the Gantt shows `step` of `rank` (default: the slowest step).
    With `compare` (another run), a section says why `run`'s median step differs from its one."""
    if path.suffix.lower() not in (".html", ".htm"):
        raise CtdaError(f"{path}: the report file name must end in .html")
    check_output_path(con, path)
    run_id = _run_id(con, run)
    steps = _columns(con, "export/html_steps.sql", {"run_id": run_id})
    if not len(steps["step"]):
        raise CtdaError(f"run {run!r} has no critical path yet; run `ctda-sql analyze --run {run}` first")
    gantt_rank, gantt_step = _gantt_step(steps, rank, step)
    cpcr = _cpcr(con, run)
    sections = advice_sections(con, run_id) + _compare_sections(con, run, compare) + [
        ("Critical-path coverage per step", _CPCR_TEXT, cpcr_figure(cpcr)),
        ("Top hotspots per phase", _HOTSPOTS_TEXT,
         hotspots_figure(_columns(con, "export/html_hotspots_by_phase.sql",
                                  {"run_id": run_id, "top": HOTSPOTS_PER_PHASE}))),
        (f"Rank {gantt_rank}, step {gantt_step}: nodes on CPU threads and GPU streams", _GANTT_TEXT,
         gantt_figure(_columns(con, "export/html_gantt_nodes.sql", ids := {
             "run_id": run_id, "rank": gantt_rank, "step": gantt_step}),
             _columns(con, "export/html_gantt_edges.sql", ids))),
        ("Path composition: ctda beside per_thread, per rank", _COMPOSITION_TEXT,
         composition_figure(_columns(con, "export/html_path_by_phase.sql", {"run_id": run_id}))),
    ]
    ranks = sorted(set(steps["rank"].tolist()))
    if len(ranks) > 1:
        sections.append(("Step time per rank", _RANKS_TEXT, step_time_figure(steps)))
        sections += _cross_rank_sections(con, run_id, step, run)
    sections += _hta_sections(con, run, gantt_rank)
    scenarios = _columns(con, "export/html_whatif_steps.sql", {"run_id": run_id})
    if len(scenarios["scenario"]):
        shown_names = _name_scenarios(scenarios)
        sections.append(("What-if: measured and predicted step time per scenario", _WHATIF_TEXT,
                         whatif_steps_figure(scenarios)))
        changes = _columns(con, "export/html_whatif_path.sql",
                           {"run_id": run_id, "top": WHATIF_CHANGES_PER_SCENARIO})
        changes["scenario"] = np.array([shown_names[name] for name in changes["scenario"].tolist()], dtype=object)
        if len(changes["scenario"]):
            sections.append(("What-if: the biggest changes on the predicted path", _WHATIF_PATH_TEXT,
                             whatif_path_figure(changes)))
    page = _page(run, ranks, steps, cpcr, sections)
    with atomic_output(path) as temporary:  # a failed write leaves the previous report whole
        _write_page(temporary, page)
    return {"path": str(path), "run": run, "charts": len(sections), "ranks": ranks,
            "gantt_rank": gantt_rank, "gantt_step": gantt_step, "compare": compare}


def _name_scenarios(scenarios: dict) -> dict[str, str]:
    """Name each what-if scenario by the `ctda-sql whatif` arguments that replay it, rather than
    its changes as raw JSON: a scenario left unnamed is called by them, a named one (--name)
    keeps its name; the hover text gives the arguments. Returns {stored name: shown name}."""
    shown_names, arguments = {}, []
    for name, changes, ranks, run_ranks in zip(scenarios["scenario"].tolist(), scenarios["changes"].tolist(),
                                               scenarios["ranks"].tolist(), scenarios["run_ranks"].tolist()):
        words = scenario_arguments(changes)
        if len(ranks) == 1 and run_ranks > 1:
            words += f" --rank {ranks[0]}"
        # unnamed: the CLI names a scenario by its changes, Warehouse.whatif(cluster=) by "cluster {...}"
        unnamed = name == changes or name.startswith("cluster {")
        shown_names[name] = words if unnamed else name
        arguments.append(words)
    scenarios["scenario"] = np.array([shown_names[name] for name in scenarios["scenario"].tolist()], dtype=object)
    scenarios["changes"] = np.array(arguments, dtype=object)
    return shown_names


def scenario_arguments(changes: str) -> str:
    """The `ctda-sql whatif` arguments of a scenario's changes (whatif_steps.changes), e.g.
    "--scale rank1:cpu_op:aten::_foreach_mul_=0"; "unchanged" for none. A cluster projection
    is named by its keys, which come from its --cluster file."""
    try:
        given = json.loads(changes)
    except (TypeError, ValueError):
        return str(changes)
    if not isinstance(given, dict):
        return str(changes)
    words = []
    for rule in given.get("scale") or []:
        ranks = f"rank{','.join(map(str, rule['ranks']))}:" if rule.get("ranks") else ""
        category = f"{rule['category']}:" if rule.get("category") else ""
        words += ["--scale", f"{ranks}{category}{rule.get('pattern')}={_number(rule.get('factor'))}"]
    for key, option, unchanged in (("comm_bandwidth_scale", "--comm-bandwidth-scale", 1.0),
                                   ("comm_latency_us", "--comm-latency-us", None),
                                   ("allreduce", "--allreduce", None), ("world_size", "--world-size", None)):
        if given.get(key, unchanged) != unchanged:
            words += [option, _number(given[key])]
    if given.get("drop_syncs"):
        words.append("--drop-syncs")
    text = shlex.join(words)
    if isinstance(given.get("cluster"), dict):
        keys = ", ".join(f"{key}={_number(value)}" for key, value in _flat(given["cluster"]))
        text = f"{text} --cluster ({keys})".strip()
    return text or "unchanged"


def _number(value) -> str:
    """A number as an argument: whole numbers without '.0', others with every digit."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _flat(section: dict, prefix: str = ""):
    for key, value in section.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        elif value is not None:
            yield f"{prefix}{key}", value


def _write_page(path: Path, page: str) -> None:
    path.write_text(page, encoding="utf-8")


# ---- data --------------------------------------------------------------------------------

def _run_id(con, run: str) -> int:
    rows = con.execute("SELECT run_id FROM runs WHERE name = ?", [run]).fetchall()
    if not rows:
        names = [r[0] for r in con.execute("SELECT name FROM runs ORDER BY name").fetchall()]
        raise CtdaError(f"no run named {run!r}; runs: {', '.join(names) or 'none (ingest first)'}")
    return rows[0][0]


def _columns(con, sql_name: str, params: dict) -> dict[str, np.ndarray]:
    return con.sql(sqlfiles.load(sql_name), params=params).fetchnumpy()


def _cpcr(con, run: str) -> dict[str, np.ndarray]:
    from ctda_sql.engine.reports import find_report, report_relation

    return report_relation(con, find_report("cpcr"), {"run": run, "top": 1_000_000}).fetchnumpy()


def _report(con, name: str, params: dict) -> dict[str, np.ndarray]:
    from ctda_sql.engine.reports import find_report, report_relation

    return report_relation(con, find_report(name), params).fetchnumpy()


def _cross_rank_sections(con, run_id: int, step: int | None, run: str) -> list[tuple]:
    """Who everyone waited for, collective skew and the cross-rank path of one step: what
    the cross-rank analysis found, for runs of 2+ ranks."""
    found = []
    waits = _columns(con, "export/html_crossrank_waits.sql", {"run_id": run_id})
    if len(waits["step"]):
        found.append(("Cross-rank: who everyone waited for, per step", _WAITS_TEXT, waits_figure(waits),
                      late_rank_table(con, run)))
    skew = _columns(con, "export/html_crossrank_skew.sql", {"run_id": run_id})
    if len(skew["seq"]):
        found.append(("Cross-rank: collective skew", _SKEW_TEXT, skew_figure(skew)))
    paths = _columns(con, "export/html_crossrank_steps.sql", {"run_id": run_id})
    if len(paths["step"]):
        if step is not None and step in paths["step"].tolist():
            shown_step = step
        else:  # the step whose path visits most ranks, then the longest: crossings to look at
            shown_step = int(paths["step"][np.lexsort((-paths["span_us"], -paths["ranks_visited"]))[0]])
        path = _columns(con, "export/html_crossrank_path.sql", {"run_id": run_id, "step": shown_step})
        found.append((f"Cross-rank: the critical path of step {shown_step} across ranks", _CROSS_PATH_TEXT,
                      cross_rank_path_figure(path)))
    return found


def _hta_sections(con, run: str, rank: int) -> list[tuple]:
    """The views HTA users look for, from the saved reports of the same names; a view the run
    has no data for (no GPU work in a CPU-only run) is left out."""
    found = []
    for title, report, params, note, figure in (
            ("GPU time: temporal breakdown per rank", "temporal_breakdown", {"run": run},
             _TEMPORAL_TEXT, temporal_figure),
            ("GPU idle time by cause, per stream", "idle_time", {"run": run}, _IDLE_TEXT, idle_figure),
            (f"Kernel breakdown of rank {rank}", "kernel_breakdown", {"run": run, "rank": rank, "top": 5},
             _KERNELS_TEXT, kernel_figure),
            ("Communication overlapped by compute, per rank", "comm_overlap", {"run": run},
             _OVERLAP_TEXT, overlap_figure),
            ("GPU queue length per stream", "queue_length", {"run": run}, _QUEUE_TEXT, queue_figure)):
        rows = _report(con, report, params)
        if len(rows["rank"]):
            found.append((title, note, figure(rows)))
    return found


def _compare_sections(con, run: str, compare: str | None) -> list[tuple]:
    """The path diff of `run` against `compare` (advice.diff): a bar per row and the rows as a
    table, the biggest changes first, the rest summed so the table still adds up."""
    if compare is None:
        return []
    from ctda_sql.advice.diff import diff

    document = diff(con, compare, run)
    shown_rows, rest = document["rows"][:DIFF_ROWS], document["rows"][DIFF_ROWS:]
    title = f"Why this run's median step differs from {compare}'s, along the critical paths"
    return [(title, _DIFF_TEXT, diff_figure(shown_rows, document["unexplained_us"]),
             _diff_table(document, shown_rows, rest))]


def _diff_table(document: dict, rows: list[dict], rest: list[dict]) -> str:
    """The rows, the rest summed, the remainder and the steps: a table whose changes add up."""
    def line(kind: str, label: str, a_us: float, b_us: float, delta_us: float, css: str = "") -> str:
        return (f'<tr{css}><td>{shown(kind)}</td><td class="label">{shown(label)}</td>'
                f"<td>{a_us / 1000:.3f}</td><td>{b_us / 1000:.3f}</td><td>{delta_us / 1000:+.3f}</td></tr>")

    body = [line(r["kind"], r["label"], r["a_us"], r["b_us"], r["delta_us"]) for r in rows]
    if rest:
        body.append(line("", f"{len(rest)} other rows", sum(r["a_us"] for r in rest),
                         sum(r["b_us"] for r in rest), sum(r["delta_us"] for r in rest)))
    a_rows = sum(r["a_us"] for r in document["rows"])
    b_rows = sum(r["b_us"] for r in document["rows"])
    body.append(line("unexplained", "not on the path (gaps, slack)", document["step_a_us"] - a_rows,
                     document["step_b_us"] - b_rows, document["unexplained_us"]))
    body.append(line("step", "median step", document["step_a_us"], document["step_b_us"],
                     document["delta_us"], ' class="total"'))
    return (f'<table class="diff"><tr><th>kind</th><th>label</th><th>{shown(document["run_a"])}, ms</th>'
            f'<th>{shown(document["run_b"])}, ms</th><th>change, ms</th></tr>{"".join(body)}</table>')


def _gantt_step(steps: dict, rank: int | None, step: int | None) -> tuple[int, int]:
    """The slowest analysed step (of `rank` when given), or the one asked for."""
    chosen = np.ones(len(steps["step"]), dtype=bool)
    if rank is not None:
        chosen &= steps["rank"] == rank
    if step is not None:
        chosen &= steps["step"] == step
    if not chosen.any():
        where = " ".join(f"{k} {v}" for k, v in (("rank", rank), ("step", step)) if v is not None)
        known = sorted({f"{r}/{s}" for r, s in zip(steps["rank"].tolist(), steps["step"].tolist())})
        raise CtdaError(f"no analysed {where} in this run; rank/step: {', '.join(known)}")
    first = int(np.flatnonzero(chosen)[0])  # rows come slowest first
    return int(steps["rank"][first]), int(steps["step"][first])



# ---- page --------------------------------------------------------------------------------

_DIFF_TEXT = ("The median step of each run, its critical path cut into annotations, ops, kernels, "
              "phases and waits on helper threads (each microsecond once): what appeared, vanished, grew "
              "or shrank, biggest change first. What no row explains is the time off the path (gaps, "
              "slack). `ctda-sql diff` and `report path_diff` list every row.")
_CPCR_TEXT = ("Each bar is one step of one rank: green is time the critical path counts; the "
              "rest is split by cause. ctda links the main and autograd threads; per_thread "
              "treats threads apart, as tools without cross-thread edges do.")
_HOTSPOTS_TEXT = (f"The {HOTSPOTS_PER_PHASE} events with the most counted self time on the path "
                  "in each phase, summed over all steps and ranks.")
_GANTT_TEXT = ("Every node of the ctda graph (default: the slowest step). Coloured nodes are on "
               "the ctda path, grey ones are not; the thin blue bars mark the per_thread path. "
               "Red lines join consecutive ctda path nodes; dashed lines are cross-thread and "
               "sync edges. Drag to zoom, double-click to reset.")
_COMPOSITION_TEXT = "Counted time on the path per phase: what each method says decides step time."
_RANKS_TEXT = "Step time of every rank: a straggler makes every other rank wait at the next collective."
_WHATIF_TEXT = ("Each `ctda-sql whatif` scenario stored for this run (whatif_steps): the mean measured "
                "step beside the mean predicted one, with the speedup over the unchanged replay.")
_WHATIF_PATH_TEXT = (f"The {WHATIF_CHANGES_PER_SCENARIO} node labels per scenario whose time on the "
                     "critical path changed most: the predicted path (whatif_path) against the "
                     "measured ctda path, summed over the scenario's steps.")

_WAITS_TEXT = ("At each collective every rank waits for the last to arrive (clocks aligned by "
               "ctda-sql's offset estimate). Each bar is one step: the time all ranks waited, by the "
               "rank they waited for. `ctda-sql report waiting_on` lists it.")
_SKEW_TEXT = ("One dot per collective call: when it started and how far apart the first and the last "
              "rank arrived, coloured by who came last. `ctda-sql report collective_skew` lists them.")
_CROSS_PATH_TEXT = ("The cross_rank critical path: from the rank that finished the step last, back "
                    "through each collective that waited for a late rank, into that rank. A lane per "
                    "rank on one time axis; red lines are where the path crosses ranks.")
_TEMPORAL_TEXT = ("GPU time per rank split into compute kernels, non-compute (communication and "
                  "memory) and idle, as HTA's temporal breakdown (`report temporal_breakdown`).")
_IDLE_TEXT = ("Where GPU streams sat idle: waiting for the host to launch (host_wait), short gaps "
              "between kernels (kernel_wait) and the rest, as HTA (`report idle_time`).")
_KERNELS_TEXT = ("The kernels with the most GPU time in each class (`report kernel_breakdown`; "
                 "other ranks with --rank).")
_OVERLAP_TEXT = ("How much of each rank's communication kernel time ran while compute kernels did "
                 "(`report comm_overlap`): overlapped communication costs no step time.")
_QUEUE_TEXT = ("Outstanding GPU operations per stream (`report queue_length`): a queue that stays "
               "near empty means the GPU waited for the CPU to launch.")

_STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 2rem auto;
       max-width: 1200px; color: #222; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
p.note { color: #555; margin: .2rem 0 .6rem; }
table.summary { border-collapse: collapse; margin: 1rem 0; }
table.summary td, table.summary th { border: 1px solid #ddd; padding: .3rem .8rem; text-align: right; }
table.summary th { background: #f4f4f4; }
section { border-top: 1px solid #eee; }
table.diff { border-collapse: collapse; margin: .6rem 0 1rem; font-size: .9rem; }
table.diff td, table.diff th { border: 1px solid #ddd; padding: .2rem .6rem; text-align: right; }
table.diff td.label { text-align: left; max-width: 40rem; overflow-wrap: anywhere; }
table.diff th { background: #f4f4f4; } table.diff tr.total td { font-weight: bold; }
"""


def _page(run: str, ranks: list[int], steps: dict, cpcr: dict, sections) -> str:
    from plotly.offline import get_plotlyjs

    parts = []
    # a section is (title, note, figure) and may add HTML of its own after the figure (a table)
    for index, (title, note, fig, *after) in enumerate(sections):
        div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{index}",
                          config={"displaylogo": False, "responsive": True})
        parts.append(f'<section><h2>{shown(title)}</h2><p class="note">{shown(note)}</p>'
                     f"{div}{''.join(after)}</section>")
    summary = "".join(
        f"<tr><th>{m}</th><td>{mean_cpcr(cpcr, m):.3f}</td>"
        f"<td>{float(np.mean(cpcr['path_us'][cpcr['method'] == m])) / 1000:.2f} ms</td></tr>"
        for m in METHODS if np.any(cpcr["method"] == m))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>ctda-sql: {shown(run)}</title>
<style>{_STYLE}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>Critical path of run <bdi>{shown(run)}</bdi></h1>
<p class="note">{len(ranks)} rank(s), {len(steps['step'])} analysed step(s); mean step
{float(np.mean(steps['window_us'])) / 1000:.2f} ms. Made by ctda-sql (CTDA-CPA).</p>
<table class="summary"><tr><th>method</th><th>mean CPCR</th><th>mean time on the path per step</th></tr>
{summary}</table>
{''.join(parts)}
</body></html>
"""
