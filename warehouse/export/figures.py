"""The HTML report's plotly figures (warehouse/export/html.py puts them on the page), one
function per figure; every string that comes from a trace is drawn as text (shown())."""

from __future__ import annotations

import html
import re

import numpy as np

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
PATH_COLORS = {"ctda": "#d62728", "per_thread": "#1f77b4"}
EDGE_COLORS = {"cross_thread": "#9467bd", "sync": "#8c564b"}


# ---- figures -----------------------------------------------------------------------------

def _subplots(titles: tuple[str, ...], **kwargs):
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=len(titles), subplot_titles=titles, **kwargs)


def to_ms(values) -> np.ndarray:
    """Microseconds as milliseconds, the unit every chart shows."""
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

    fig = _subplots(tuple(f"{m}: mean CPCR {mean_cpcr(cpcr, m):.2f}" for m in METHODS), shared_yaxes=True)
    for column, (method) in enumerate(METHODS, start=1):
        rows = cpcr["method"] == method
        labels = [f"rank {r} · step {s}" for r, s in zip(cpcr["rank"][rows], cpcr["step"][rows])]
        for key, name, color in STEP_SPLIT:
            fig.add_trace(go.Bar(
                x=labels, y=to_ms(cpcr[key][rows]), name=name, marker_color=color,
                legendgroup=key, showlegend=column == 1,
                text=[f"CPCR {v:.2f}" for v in cpcr["cpcr"][rows]] if key == "path_us" else None,
                textposition="inside", hovertemplate=f"{name}: %{{y:.2f}} ms<extra>%{{x}}</extra>",
            ), row=1, col=column)
    fig.update_layout(barmode="stack")
    _legend_above(fig, 420, top=140)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    return fig


def mean_cpcr(cpcr: dict, method: str) -> float:
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
                y=distinct_labels([f"{shown(phase)} · {shown(n, 48)}" for n in names[mine]]),
                x=to_ms(hot["path_us"][rows][mine]),
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


def distinct_labels(labels: list[str]) -> list[str]:
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
    start, length = to_ms(nodes["start_us"] - origin), to_ms(nodes["end_us"] - nodes["start_us"])
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
    x0, x1 = to_ms(edges["from_us"][mask] - origin).tolist(), to_ms(edges["to_us"][mask] - origin).tolist()
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
        fig.add_trace(go.Bar(x=labels[mine], y=to_ms(by_phase["path_us"][mine]), name=shown(phase),
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
                             y=to_ms(steps["window_us"][mine][order]), name=f"rank {rank}",
                             hovertemplate="%{y:.2f} ms<extra>%{x}</extra>"))
    fig.update_layout(barmode="group", height=380, yaxis_title="step time, ms")
    return fig


def whatif_steps_figure(scenarios: dict):
    """Per what-if scenario: mean measured step time beside the mean predicted one."""
    import plotly.graph_objects as go

    names = [shown(s, 60) for s in scenarios["scenario"]]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=names, y=to_ms(scenarios["measured_us"]), name="measured", marker_color="#7f7f7f",
                         hovertemplate="measured %{y:.2f} ms<extra>%{x}</extra>"))
    fig.add_trace(go.Bar(x=names, y=to_ms(scenarios["predicted_us"]), name="predicted", marker_color="#2ca02c",
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
            x=to_ms(changes["change_us"][mine]), orientation="h", name=shown(scenario, 60),
            customdata=np.stack([_shown_all(changes["label"][mine]), to_ms(changes["measured_us"][mine]),
                                 to_ms(changes["predicted_us"][mine])], axis=-1),
            hovertemplate="%{customdata[0]}<br>on the measured path %{customdata[1]:.2f} ms, "
                          "on the predicted path %{customdata[2]:.2f} ms<extra></extra>"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_layout(xaxis_title="change of time on the path, ms (all steps)")
    _legend_above(fig, max(360, 24 * len(changes["scenario"]) + 200))
    return fig


def diff_figure(rows: list[dict], unexplained_us: float):
    """The path diff's rows (advice.diff) as horizontal bars of their change, biggest first,
    then the remainder off the path: red where run B spends more, green where it spends less."""
    import plotly.graph_objects as go

    labels = distinct_labels([f"{shown(r['kind'])} · {shown(r['label'], 50)}" for r in rows] + ["not on the path"])
    deltas = to_ms([r["delta_us"] for r in rows] + [unexplained_us])
    colors = ["#d62728" if d > 0 else "#2ca02c" for d in deltas[:-1]] + ["#7f7f7f"]
    notes = [f"{shown(r['label'])}<br>{r['a_us'] / 1000:.3f} → {r['b_us'] / 1000:.3f} ms" for r in rows]
    fig = go.Figure(go.Bar(y=labels, x=deltas, orientation="h", marker_color=colors,
                           customdata=notes + ["gaps and slack off the path"],
                           hovertemplate="%{customdata}<br>%{x:+.3f} ms<extra></extra>"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_layout(height=max(300, 26 * len(labels) + 120), xaxis_title="change of the median step, ms")
    return fig


def waits_figure(waits: dict):
    """Per step, the wait at collectives stacked by the rank that arrived last."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for rank in sorted(set(waits["waited_for_rank"].tolist())):
        mine = waits["waited_for_rank"] == rank
        fig.add_trace(go.Bar(x=[f"step {s}" for s in waits["step"][mine]], y=to_ms(waits["wait_us"][mine]),
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
            x=to_ms(skew["since_first_us"][mine]), y=to_ms(skew["skew_us"][mine]), mode="markers",
            name=f"rank {rank} arrived last", marker={"size": 8},
            customdata=np.stack([_shown_all(skew["name"][mine]), _shown_all(skew["pg"][mine]),
                                 skew["seq"][mine], skew["step"][mine],
                                 np.nan_to_num(skew["bytes"][mine].astype(float), nan=-1),
                                 to_ms(skew["total_wait_us"][mine])], axis=-1),
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
    start, length = to_ms(path["start_us"] - origin), to_ms(path["end_us"] - path["start_us"])
    lanes = np.array([f"rank {r}" for r in path["node_rank"].tolist()], dtype=object)
    hover = np.stack([_shown_all(path["label"]), _shown_all(path["phase"]), to_ms(path["counted_us"]),
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
        fig.add_trace(go.Bar(x=labels, y=to_ms(rows[key]), name=name, marker_color=color,
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
        fig.add_trace(go.Bar(x=labels[mine], y=to_ms(rows["idle_us"][mine]), name=shown(category),
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
            y=distinct_labels([f"{shown(kind)} · {shown(n, 48)}" for n in rows["name"][mine]]),
            x=to_ms(rows["total_us"][mine]),
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
        customdata=np.stack([to_ms(rows["communication_us"]), to_ms(rows["overlapped_us"])], axis=-1),
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
