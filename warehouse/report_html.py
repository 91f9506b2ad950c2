"""`ctda-sql export html`: one self-contained HTML report of a run, with plotly charts.

plotly, because its figures are built from columns in Python with no server and no
notebook, and `plotly.offline.get_plotlyjs()` gives the whole JavaScript library to inline
(one file, no network when opened); its bar traces take a `base`, which makes the Gantt chart
a plain horizontal bar chart. The data come from the saved `cpcr` report and
sql/export/html_*.sql; this module only shapes columns into figures.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np

from . import sqlfiles
from .errors import CtdaError
from .outputfile import atomic_output, check_output_path

METHODS = ("ctda", "per_thread")
PHASE_COLORS = {
    "DataLoad": "#8c564b", "Forward": "#1f77b4", "Loss": "#17becf", "Backward": "#ff7f0e",
    "Communication": "#d62728", "Update": "#2ca02c", "Other": "#7f7f7f", "cpu": "#9467bd",
    "gpu": "#e377c2",
}
# the cpcr report's split of a step: counted time first, then where the rest went
STEP_SPLIT = (
    ("path_us", "on the path (counted)", "#2ca02c"),
    ("cpu_gap_us", "CPU gaps in path nodes", "#ff9896"),
    ("gpu_idle_us", "GPU idle in path nodes", "#c5b0d5"),
    ("queued_idle_us", "device idle with work queued, cause not in the trace", "#8c564b"),
    ("launch_delay_us", "launch delay", "#ffbb78"),
    ("between_nodes_us", "between path nodes", "#9edae5"),
    ("slack_before_us", "slack before the first node", "#dbdb8d"),
    ("slack_after_us", "slack after the last node", "#c7c7c7"),
)
# a hostile trace's names are text: plotly renders a subset of HTML in every string it draws
# (<a href>, <b>, <span style="...url()">), and a bidi override reverses what follows it
_BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
HOTSPOTS_PER_PHASE = 5
WHATIF_CHANGES_PER_SCENARIO = 5
PATH_COLORS = {"ctda": "#d62728", "per_thread": "#1f77b4"}
EDGE_COLORS = {"cross_thread": "#9467bd", "sync": "#8c564b"}


def write_html(con, path: Path, run: str, step: int | None = None, rank: int | None = None) -> dict:
    """Write the report of `run`; the Gantt shows `step` of `rank` (default: the slowest step)."""
    if path.suffix.lower() not in (".html", ".htm"):
        raise CtdaError(f"{path}: the report file name must end in .html")
    check_output_path(con, path)
    run_id = _run_id(con, run)
    steps = _columns(con, "export/html_steps.sql", {"run_id": run_id})
    if not len(steps["step"]):
        raise CtdaError(f"run {run!r} has no critical path yet; run `ctda-sql analyze --run {run}` first")
    gantt_rank, gantt_step = _gantt_step(steps, rank, step)
    cpcr = _cpcr(con, run)
    sections = [
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
        sections += _cross_rank_sections(con, run_id, step)
    sections += _hta_sections(con, run, gantt_rank)
    scenarios = _columns(con, "export/html_whatif_steps.sql", {"run_id": run_id})
    if len(scenarios["scenario"]):
        sections.append(("What-if: measured and predicted step time per scenario", _WHATIF_TEXT,
                         whatif_steps_figure(scenarios)))
        changes = _columns(con, "export/html_whatif_path.sql",
                           {"run_id": run_id, "top": WHATIF_CHANGES_PER_SCENARIO})
        if len(changes["scenario"]):
            sections.append(("What-if: the biggest changes on the predicted path", _WHATIF_PATH_TEXT,
                             whatif_path_figure(changes)))
    page = _page(run, ranks, steps, cpcr, sections)
    with atomic_output(path) as temporary:  # a failed write leaves the previous report whole
        _write_page(temporary, page)
    return {"path": str(path), "run": run, "charts": len(sections), "ranks": ranks,
            "gantt_rank": gantt_rank, "gantt_step": gantt_step}


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
    from .reports import find_report, report_relation

    return report_relation(con, find_report("cpcr"), {"run": run, "top": 1_000_000}).fetchnumpy()


def _report(con, name: str, params: dict) -> dict[str, np.ndarray]:
    from .reports import find_report, report_relation

    return report_relation(con, find_report(name), params).fetchnumpy()


def _cross_rank_sections(con, run_id: int, step: int | None) -> list[tuple]:
    """Who everyone waited for, collective skew and the cross-rank path of one step: what
    the cross-rank analysis found, for runs of 2+ ranks."""
    found = []
    waits = _columns(con, "export/html_crossrank_waits.sql", {"run_id": run_id})
    if len(waits["step"]):
        found.append(("Cross-rank: who everyone waited for, per step", _WAITS_TEXT, waits_figure(waits)))
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


# ---- figures -----------------------------------------------------------------------------

def _subplots(titles: tuple[str, ...], **kwargs):
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=len(titles), subplot_titles=titles, **kwargs)


def _ms(values) -> np.ndarray:
    return np.asarray(values, dtype=float) / 1000.0


def _legend_above(fig, height: int, top: int = 100):
    """The legend in rows at the top of the figure, above the plot and its subplot titles:
    below the plot, it covered the x axis title. `top` px are kept for it."""
    fig.update_layout(height=height + top, margin={"t": top},
                      legend={"orientation": "h", "x": 0, "xanchor": "left",
                              "yref": "container", "y": 0.995, "yanchor": "top"})


def cpcr_figure(cpcr: dict):
    """Stacked bars per step and rank: counted time and the remainder split, per method."""
    import plotly.graph_objects as go

    fig = _subplots(tuple(f"{m}: mean CPCR {_mean(cpcr, m):.2f}" for m in METHODS), shared_yaxes=True)
    for column, (method) in enumerate(METHODS, start=1):
        rows = cpcr["method"] == method
        labels = [f"rank {r} · step {s}" for r, s in zip(cpcr["rank"][rows], cpcr["step"][rows])]
        for key, name, color in STEP_SPLIT:
            fig.add_trace(go.Bar(
                x=labels, y=_ms(cpcr[key][rows]), name=name, marker_color=color,
                legendgroup=key, showlegend=column == 1,
                text=[f"CPCR {v:.2f}" for v in cpcr["cpcr"][rows]] if key == "path_us" else None,
                textposition="inside", hovertemplate=f"{name}: %{{y:.2f}} ms<extra>%{{x}}</extra>",
            ), row=1, col=column)
    fig.update_layout(barmode="stack")
    _legend_above(fig, 420, top=140)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    return fig


def _mean(cpcr: dict, method: str) -> float:
    values = cpcr["cpcr"][cpcr["method"] == method]
    return float(np.mean(values)) if len(values) else float("nan")


def hotspots_figure(hot: dict):
    """Horizontal bars: the events with the most counted time per phase, one plot per method,
    stacked so each has the page's width for its labels (side by side they were cut)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    counts = [max(int(np.sum(hot["method"] == m)), 1) for m in METHODS]
    plots = 22 * sum(counts) + 60 * len(METHODS)
    gap = 110  # px between the plots: the upper one's axis title, the lower one's title
    fig = make_subplots(rows=len(METHODS), cols=1, subplot_titles=METHODS, row_heights=counts,
                        vertical_spacing=gap / (plots + gap * (len(METHODS) - 1)))
    for row, method in enumerate(METHODS, start=1):
        rows = hot["method"] == method
        phases, names = hot["phase"][rows], hot["name"][rows]
        for phase in dict.fromkeys(phases.tolist()):
            mine = phases == phase
            fig.add_trace(go.Bar(
                y=_distinct([f"{shown(phase)} · {shown(n, 48)}" for n in names[mine]]),
                x=_ms(hot["path_us"][rows][mine]),
                orientation="h", name=shown(phase), marker_color=PHASE_COLORS.get(phase, "#7f7f7f"),
                legendgroup=phase, showlegend=row == 1,
                customdata=np.stack([_shown_all(names[mine]), hot["share_of_path"][rows][mine]], axis=-1),
                hovertemplate="%{customdata[0]}<br>%{x:.2f} ms on the path "
                              "(%{customdata[1]:.1%})<extra></extra>",
            ), row=row, col=1)
        fig.update_yaxes(autorange="reversed", automargin=True, row=row, col=1)
        fig.update_xaxes(title_text="ms on the path", row=row, col=1)
    _legend_above(fig, plots + gap * (len(METHODS) - 1) + 60, top=100)
    return fig


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def shown(value, width: int | None = None) -> str:
    """A name from the trace (or a run, scenario, phase name) as plotly and the page show it:
    its markup escaped, so plotly draws `<a href=...>` as those characters and fetches
    nothing, and bidi controls written out (`<U+202E>`), so they reverse nothing."""
    text = _BIDI_CONTROLS.sub(lambda m: f"<U+{ord(m.group()):04X}>", str(value))
    return html.escape(text if width is None else _short(text, width), quote=False)


def _distinct(labels: list[str]) -> list[str]:
    """Category labels made distinct: two long names cut to the same prefix would share one
    bar (`void cudnn::bn_bw_1C11_kernel_new<float, float,…` twice)."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return out


def _shown_all(values, width: int | None = None) -> np.ndarray:
    return np.array([shown(v, width) for v in values.tolist()], dtype=object)


def gantt_figure(nodes: dict, edges: dict):
    """One step: a lane per CPU thread and GPU stream, path nodes coloured by phase, the
    rest grey, the per_thread path as a thin blue bar, path hops and cross-thread/sync edges
    as lines."""
    import plotly.graph_objects as go

    fig = go.Figure()
    origin = float(np.min(nodes["start_us"])) if len(nodes["start_us"]) else 0.0
    start, length = _ms(nodes["start_us"] - origin), _ms(nodes["end_us"] - nodes["start_us"])
    lane_text = _shown_all(nodes["lane"])  # a thread's role or id comes from the trace
    lanes = {int(n): lane for n, lane in zip(nodes["node_id"].tolist(), lane_text.tolist())}
    hover = np.stack([_shown_all(nodes["label"]), _shown_all(nodes["phase"]), length], axis=-1)
    template = "%{customdata[0]}<br>%{customdata[1]}, %{customdata[2]:.3f} ms<extra></extra>"

    def bars(mask, name, color, width, group=None, show=True):
        fig.add_trace(go.Bar(
            y=lane_text[mask], x=np.maximum(length[mask], 1e-4), base=start[mask], orientation="h",
            name=name, marker_color=color, width=width, customdata=hover[mask],
            hovertemplate=template, legendgroup=group or name, showlegend=show))

    bars(~nodes["on_ctda"], "not on the ctda path", "rgba(150,150,150,0.45)", 0.6)
    for phase in dict.fromkeys(nodes["phase"][nodes["on_ctda"]].tolist()):
        bars(nodes["on_ctda"] & (nodes["phase"] == phase), f"ctda path: {shown(phase)}",
             PHASE_COLORS.get(phase, "#7f7f7f"), 0.6)
    bars(nodes["on_per_thread"], "per_thread path", PATH_COLORS["per_thread"], 0.18)
    for what, color, dash, label in (
            ("ctda", PATH_COLORS["ctda"], "solid", "ctda path hop"),
            ("per_thread", PATH_COLORS["per_thread"], "dot", "per_thread path hop"),
            ("cross_thread", EDGE_COLORS["cross_thread"], "dash", "cross-thread edge"),
            ("sync", EDGE_COLORS["sync"], "dashdot", "sync edge")):
        mask = (edges["what"] == what) if what in METHODS else ((edges["what"] == "edge") & (edges["type"] == what))
        x, y = _segments(edges, mask, lanes, origin)
        if x:
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=label, hoverinfo="skip",
                                     line={"color": color, "dash": dash, "width": 1.5}))
    fig.update_layout(barmode="overlay", xaxis_title="ms since the step's first node")
    _legend_above(fig, max(360, 60 * len(set(lanes.values())) + 220))
    fig.update_yaxes(categoryorder="category descending", automargin=True)
    return fig


def _segments(edges: dict, mask, lanes: dict, origin: float) -> tuple[list, list]:
    """x and y of line segments (None between them) from each source lane to its target lane."""
    src, dst = edges["src"][mask].tolist(), edges["dst"][mask].tolist()
    x0, x1 = _ms(edges["from_us"][mask] - origin).tolist(), _ms(edges["to_us"][mask] - origin).tolist()
    xs, ys = [], []
    for a, b, s, d in zip(x0, x1, src, dst):
        if s in lanes and d in lanes:
            xs += [a, b, None]
            ys += [lanes[s], lanes[d], None]
    return xs, ys


def composition_figure(by_phase: dict):
    """Counted time per phase, stacked, for each method and rank side by side."""
    import plotly.graph_objects as go

    fig = go.Figure()
    labels = np.array([f"{m} · rank {r}" for m, r in zip(by_phase["method"], by_phase["rank"])], dtype=object)
    for phase in sorted(set(by_phase["phase"].tolist())):
        mine = by_phase["phase"] == phase
        fig.add_trace(go.Bar(x=labels[mine], y=_ms(by_phase["path_us"][mine]), name=shown(phase),
                             marker_color=PHASE_COLORS.get(phase, "#7f7f7f"),
                             hovertemplate="%{fullData.name}: %{y:.2f} ms<extra>%{x}</extra>"))
    fig.update_layout(barmode="stack", yaxis_title="ms on the path (all steps)")
    _legend_above(fig, 440)
    return fig


def step_time_figure(steps: dict):
    """Step time per rank, grouped by step: stragglers stand out."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for rank in sorted(set(steps["rank"].tolist())):
        mine = steps["rank"] == rank
        order = np.argsort(steps["step"][mine])
        fig.add_trace(go.Bar(x=[f"step {s}" for s in steps["step"][mine][order]],
                             y=_ms(steps["window_us"][mine][order]), name=f"rank {rank}",
                             hovertemplate="%{y:.2f} ms<extra>%{x}</extra>"))
    fig.update_layout(barmode="group", height=380, yaxis_title="step time, ms")
    return fig


def whatif_steps_figure(scenarios: dict):
    """Per what-if scenario: mean measured step time beside the mean predicted one."""
    import plotly.graph_objects as go

    names = [shown(s, 60) for s in scenarios["scenario"]]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=names, y=_ms(scenarios["measured_us"]), name="measured", marker_color="#7f7f7f",
                         hovertemplate="measured %{y:.2f} ms<extra>%{x}</extra>"))
    fig.add_trace(go.Bar(x=names, y=_ms(scenarios["predicted_us"]), name="predicted", marker_color="#2ca02c",
                         text=[f"{v:.2f}x" for v in scenarios["speedup"]], textposition="outside",
                         customdata=np.stack([_shown_all(scenarios["changes"]), scenarios["steps"]], axis=-1),
                         hovertemplate="predicted %{y:.2f} ms over %{customdata[1]} step(s)<br>"
                                       "%{customdata[0]}<extra>%{x}</extra>"))
    fig.update_layout(barmode="group", height=400, yaxis_title="mean step time, ms")
    return fig


def whatif_path_figure(changes: dict):
    """Per scenario, the node labels whose time on the path changed most (predicted - measured)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for scenario in dict.fromkeys(changes["scenario"].tolist()):
        mine = changes["scenario"] == scenario
        fig.add_trace(go.Bar(
            y=[f"{shown(scenario, 24)} · {shown(label, 40)}" for label in changes["label"][mine]],
            x=_ms(changes["change_us"][mine]), orientation="h", name=shown(scenario, 60),
            customdata=np.stack([_shown_all(changes["label"][mine]), _ms(changes["measured_us"][mine]),
                                 _ms(changes["predicted_us"][mine])], axis=-1),
            hovertemplate="%{customdata[0]}<br>on the measured path %{customdata[1]:.2f} ms, "
                          "on the predicted path %{customdata[2]:.2f} ms<extra></extra>"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_layout(xaxis_title="change of time on the path, ms (all steps)")
    _legend_above(fig, max(360, 24 * len(changes["scenario"]) + 200))
    return fig


def waits_figure(waits: dict):
    """Per step, the wait at collectives stacked by the rank that arrived last."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for rank in sorted(set(waits["waited_for_rank"].tolist())):
        mine = waits["waited_for_rank"] == rank
        fig.add_trace(go.Bar(x=[f"step {s}" for s in waits["step"][mine]], y=_ms(waits["wait_us"][mine]),
                             name=f"waited for rank {rank}", customdata=waits["collectives"][mine],
                             hovertemplate="%{y:.2f} ms over %{customdata} collective(s)"
                                           "<extra>%{fullData.name}</extra>"))
    fig.update_layout(barmode="stack", yaxis_title="time ranks waited, ms")
    _legend_above(fig, 400)
    return fig


def skew_figure(skew: dict):
    """Each matched collective: when it started and how far apart the ranks arrived."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for rank in sorted(set(skew["last_rank"].tolist())):
        mine = skew["last_rank"] == rank
        fig.add_trace(go.Scatter(
            x=_ms(skew["since_first_us"][mine]), y=_ms(skew["skew_us"][mine]), mode="markers",
            name=f"rank {rank} arrived last", marker={"size": 8},
            customdata=np.stack([_shown_all(skew["name"][mine]), _shown_all(skew["pg"][mine]),
                                 skew["seq"][mine], skew["step"][mine],
                                 np.nan_to_num(skew["bytes"][mine].astype(float), nan=-1),
                                 _ms(skew["total_wait_us"][mine])], axis=-1),
            hovertemplate="%{customdata[0]} (group %{customdata[1]}, call %{customdata[2]}, step "
                          "%{customdata[3]})<br>skew %{y:.3f} ms, %{customdata[5]:.3f} ms waited in all"
                          "<br>%{customdata[4]:,} bytes<extra>%{fullData.name}</extra>"))
    fig.update_layout(xaxis_title="ms since the run's first collective (aligned clocks)",
                      yaxis_title="arrival skew, ms")
    _legend_above(fig, 400)
    return fig


def cross_rank_path_figure(path: dict):
    """One step's cross-rank path on one time axis (aligned clocks): a lane per rank, the
    path's nodes coloured by phase, a line from each node to the next (red where it changes
    rank)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    origin = float(np.min(path["start_us"]))
    start, length = _ms(path["start_us"] - origin), _ms(path["end_us"] - path["start_us"])
    lanes = np.array([f"rank {r}" for r in path["node_rank"].tolist()], dtype=object)
    hover = np.stack([_shown_all(path["label"]), _shown_all(path["phase"]), _ms(path["counted_us"]),
                      path["seq"]], axis=-1)
    for phase in dict.fromkeys(path["phase"].tolist()):
        mine = path["phase"] == phase
        fig.add_trace(go.Bar(
            y=lanes[mine], x=np.maximum(length[mine], 1e-4), base=start[mine], orientation="h",
            name=shown(phase), marker_color=PHASE_COLORS.get(phase, "#7f7f7f"), width=0.5,
            customdata=hover[mine],
            hovertemplate="#%{customdata[3]} %{customdata[0]}<br>%{customdata[1]}, "
                          "%{customdata[2]:.3f} ms counted<extra>%{y}</extra>"))
    ends, starts = start + length, start
    for crossing, name, style in ((False, "path hop on one rank", {"color": "#555", "width": 1}),
                                  (True, "path crosses ranks", {"color": PATH_COLORS["ctda"], "width": 2.5})):
        xs, ys = [], []
        for i in range(len(lanes) - 1):
            if (lanes[i] != lanes[i + 1]) == crossing:
                xs += [ends[i], starts[i + 1], None]
                ys += [lanes[i], lanes[i + 1], None]
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, hoverinfo="skip", line=style))
    fig.update_layout(barmode="overlay", xaxis_title="ms since the path's first node (aligned clocks)")
    fig.update_yaxes(categoryorder="category descending", automargin=True)
    _legend_above(fig, max(320, 70 * len(set(lanes.tolist())) + 220))
    return fig


def temporal_figure(rows: dict):
    """GPU time per rank: compute, non-compute, idle (HTA's temporal breakdown)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    labels = [f"rank {r}" for r in rows["rank"]]
    for key, name, color in (("compute_us", "compute", "#2ca02c"), ("non_compute_us", "non-compute "
                             "(communication, memory)", "#d62728"), ("idle_us", "idle", "#c7c7c7")):
        fig.add_trace(go.Bar(x=labels, y=_ms(rows[key]), name=name, marker_color=color,
                             hovertemplate=f"{name}: %{{y:.2f}} ms<extra>%{{x}}</extra>"))
    fig.update_layout(barmode="stack", yaxis_title="GPU time, ms")
    _legend_above(fig, 380)
    return fig


def idle_figure(rows: dict):
    """GPU idle time per rank and stream, by cause (HTA's idle time)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    labels = np.array([f"rank {r} · stream {s}" for r, s in zip(rows["rank"], rows["stream"])], dtype=object)
    for category in sorted(set(rows["category"].tolist())):
        mine = rows["category"] == category
        fig.add_trace(go.Bar(x=labels[mine], y=_ms(rows["idle_us"][mine]), name=shown(category),
                             customdata=rows["ratio"][mine],
                             hovertemplate="%{fullData.name}: %{y:.2f} ms (%{customdata:.1%} of idle)"
                                           "<extra>%{x}</extra>"))
    fig.update_layout(barmode="stack", yaxis_title="idle, ms")
    _legend_above(fig, 400)
    return fig


def kernel_figure(rows: dict):
    """The top kernels of each class (compute, communication, memory) of one rank."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for kind in dict.fromkeys(rows["kernel_type"].tolist()):
        mine = rows["kernel_type"] == kind
        fig.add_trace(go.Bar(
            y=_distinct([f"{shown(kind)} · {shown(n, 48)}" for n in rows["name"][mine]]),
            x=_ms(rows["total_us"][mine]),
            orientation="h", name=shown(kind),
            customdata=np.stack([_shown_all(rows["name"][mine]), rows["kernel_count"][mine],
                                 rows["share_pct"][mine]], axis=-1),
            hovertemplate="%{customdata[0]}<br>%{x:.2f} ms in %{customdata[1]} launches "
                          "(%{customdata[2]:.1f}% of its class)<extra></extra>"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_layout(xaxis_title="GPU time, ms")
    _legend_above(fig, max(320, 24 * len(rows["name"]) + 200))
    return fig


def overlap_figure(rows: dict):
    """Share of communication kernel time that compute kernels overlapped, per rank."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(
        x=[f"rank {r}" for r in rows["rank"]], y=rows["overlap_pct"], name="overlapped",
        customdata=np.stack([_ms(rows["communication_us"]), _ms(rows["overlapped_us"])], axis=-1),
        hovertemplate="%{y:.1f}% overlapped: %{customdata[1]:.2f} of %{customdata[0]:.2f} ms"
                      "<extra>%{x}</extra>"))
    fig.update_layout(height=340, yaxis_title="% of communication overlapped", yaxis_range=[0, 100])
    return fig


def queue_figure(rows: dict):
    """Outstanding GPU operations per rank and stream: mean and maximum."""
    import plotly.graph_objects as go

    fig = go.Figure()
    labels = [f"rank {r} · stream {s}" for r, s in zip(rows["rank"], rows["stream"])]
    for key, name in (("time_weighted_mean", "mean (time-weighted)"), ("max_queue_length", "maximum")):
        fig.add_trace(go.Bar(x=labels, y=rows[key], name=name,
                             hovertemplate=f"{name}: %{{y:.1f}}<extra>%{{x}}</extra>"))
    fig.update_layout(barmode="group", yaxis_title="operations queued")
    _legend_above(fig, 380)
    return fig


# ---- page --------------------------------------------------------------------------------

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
"""


def _page(run: str, ranks: list[int], steps: dict, cpcr: dict, sections) -> str:
    from plotly.offline import get_plotlyjs

    parts = []
    for index, (title, note, fig) in enumerate(sections):
        div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{index}",
                          config={"displaylogo": False, "responsive": True})
        parts.append(f'<section><h2>{shown(title)}</h2><p class="note">{shown(note)}</p>'
                     f"{div}</section>")
    summary = "".join(
        f"<tr><th>{m}</th><td>{_mean(cpcr, m):.3f}</td>"
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
