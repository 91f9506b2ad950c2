"""The HTML report's advice (the run's stored `ctda-sql advise`: findings and causal profile,
at the top of the page) and, in the cross-rank part, what on each rank the path ran through
(report cross_rank_hotspots), so a late rank is named with what made it late."""

from __future__ import annotations

import numpy as np

from ctda_sql.core import sqlfiles
from ctda_sql.export.figures import distinct_labels, shown, to_ms

ADVICE_TEXT = ("The findings of the run's last `ctda-sql advise`, ranked by the saving the what-if replay "
               "predicts for each fix (the median over steps), then the causal profile: for the largest "
               "regions on the critical path, the predicted saving per step if each took half its time or "
               "none, beside its time on the path. docs/advice.md explains each rule.")
LATE_TEXT = ("What the cross-rank critical path ran through on each rank, largest first "
             "(report cross_rank_hotspots): on the rank everyone waited for, what made it late.")


def _columns(con, sql_name: str, params: dict) -> dict[str, np.ndarray]:
    return con.execute(sqlfiles.load(sql_name), params).fetchnumpy()


def advice_sections(con, run_id: int) -> list[tuple]:
    """One section when the run has stored advice: the profile chart and the findings table."""
    findings = _columns(con, "export/html_advice_findings.sql", {"run_id": run_id})
    if not len(findings["rule"]):
        return []
    profile = _columns(con, "export/html_advice_profile.sql", {"run_id": run_id})
    return [("What to fix first, and what it buys", ADVICE_TEXT, profile_figure(profile),
             findings_table(findings))]


def findings_table(findings: dict) -> str:
    rows = []
    for i in range(len(findings["rule"])):
        saving = findings["saving_us"][i]
        saved = ("not replayed" if saving is None or (isinstance(saving, float) and np.isnan(saving))
                 else f"{float(saving) / 1000:.2f} ms ({float(findings['saving_share'][i]):.0%})")
        rows.append(f"<tr><td>{int(findings['place'][i])}</td><td>{shown(findings['rule'][i])}</td>"
                    f"<td>{saved}</td><td class=\"label\">{shown(findings['title'][i])}<br>"
                    f"<small>{shown(findings['evidence'][i])}</small></td>"
                    f"<td class=\"label\">{shown(findings['fix'][i] or 'none can be named from the trace')}"
                    f"<br><code>{shown(findings['scenario'][i] or '')}</code></td></tr>")
    return ('<table class="advice"><tr><th>#</th><th>rule</th><th>predicted saving per step</th>'
            f'<th>finding</th><th>fix, and the whatif arguments replayed</th></tr>{"".join(rows)}</table>')


def profile_figure(profile: dict):
    """Per region: its time on the path, and the replay's saving at half and at zero time."""
    import plotly.graph_objects as go

    labels = distinct_labels([f"{shown(k)} · {shown(label, 50)}" + (f" (rank {int(r)})" if r is not None else "")
                        for k, label, r in zip(profile["kind"], profile["label"], _ranks(profile))])
    fig = go.Figure()
    for column, name, color in (("path_us", "time on the path", "#7f7f7f"),
                                ("saving_at_half_us", "saving at half its time", "#9ecae1"),
                                ("saving_at_zero_us", "saving at no time", "#3182bd")):
        fig.add_trace(go.Bar(y=labels, x=to_ms(profile[column]), name=name, orientation="h", marker_color=color,
                             hovertemplate="%{x:.3f} ms<extra>%{fullData.name}</extra>"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_layout(barmode="group", height=max(300, 60 * len(labels) + 120), xaxis_title="ms per step")
    return fig


def _ranks(profile: dict) -> list:
    ranks = profile["rank"]
    mask = np.ma.getmaskarray(ranks) if np.ma.isMaskedArray(ranks) else np.zeros(len(ranks), dtype=bool)
    return [None if masked else value for value, masked in zip(np.asarray(ranks).tolist(), mask)]


def late_rank_table(con, run: str, top: int = 8) -> str:
    """The cross-rank path's largest events and annotations per rank, as an HTML table."""
    from ctda_sql.engine.reports import find_report, run_report

    cursor = run_report(con, find_report("cross_rank_hotspots"), {"run": run, "top": top})
    columns = [d[0] for d in cursor.description]
    rows = [dict(zip(columns, row)) for row in cursor.fetchall()]
    if not rows:
        return ""
    body = "".join(f"<tr><td>{int(r['rank'])}</td><td class=\"label\">{shown(r['name'])}</td>"
                   f"<td>{shown(r['category'])}</td><td>{float(r['path_us']) / 1000:.2f}</td></tr>" for r in rows)
    return (f'<p class="note">{shown(LATE_TEXT)}</p><table class="late"><tr><th>rank</th><th>on the path</th>'
            f"<th>category</th><th>ms on the path</th></tr>{body}</table>")
