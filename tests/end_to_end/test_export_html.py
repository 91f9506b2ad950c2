"""`ctda-sql export html`: one self-contained file whose charts draw in a browser."""

from __future__ import annotations

import http.server
import json
import re
import threading
from pathlib import Path

import pytest

from ctda_sql import Warehouse
from ctda_sql.export.chromium import find_chromium, render

from helpers.cli import assert_one_error_line, chromium_or_skip, ingest_fig
from helpers.traces import figure1_trace, two_rank_folder

CHART_DIV = re.compile(r'<div id="chart-(\d+)"')


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    folder = tmp_path_factory.mktemp("html")
    wh = Warehouse(folder / "w.duckdb")
    wh.ingest([two_rank_folder(folder / "fig")], run="fig")
    wh.ingest([figure1_trace().write(folder / "one.json")], run="one")
    wh.analyze()
    yield wh
    wh.close()


@pytest.fixture(scope="module")
def report(warehouse, tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "fig.html"
    done = warehouse.export_html(path, run="fig")
    return path, done


def test_report_is_self_contained(report):
    text = report[0].read_text(encoding="utf-8")
    tags = re.findall(r"<(?:script|link|img|iframe|embed|object)\b[^>]*>", text)
    assert not [t for t in tags if re.search(r"\b(src|href|data)=", t)]  # plotly's JavaScript is inlined
    assert "Plotly.newPlot" in text and len(text) > 1_000_000


def test_report_has_every_chart_with_its_data(report):
    path, done = report
    text = path.read_text(encoding="utf-8")
    assert sorted(int(i) for i in CHART_DIV.findall(text)) == list(range(done["charts"]))
    for title in ("Critical-path coverage per step", "Top hotspots per phase", "nodes on CPU threads and GPU streams",
                  "ctda beside per_thread", "Step time per rank"):
        assert title in text
    for trace_name in ("on the path (counted)", "ctda path hop", "cross-thread edge", "per_thread path"):
        assert f'"name":"{trace_name}"' in text


def test_gantt_defaults_to_the_slowest_step(warehouse, report):
    lengths = dict(((r, s), w) for r, s, w in warehouse.sql(
        "SELECT rank, step, window_us FROM analysis_windows JOIN runs USING (run_id) "
        "WHERE runs.name = 'fig'").fetchall())
    assert lengths[(report[1]["gantt_rank"], report[1]["gantt_step"])] == max(lengths.values())


def test_single_rank_run_has_no_rank_comparison(warehouse, tmp_path):
    done = warehouse.export_html(tmp_path / "one.html", run="one")
    assert done["ranks"] == [0]
    assert "Step time per rank" not in (tmp_path / "one.html").read_text(encoding="utf-8")


def test_step_and_rank_choose_the_gantt(warehouse, tmp_path):
    done = warehouse.export_html(tmp_path / "r1.html", run="fig", rank=1, step=1)
    assert (done["gantt_rank"], done["gantt_step"]) == (1, 1)
    assert "Rank 1, step 1" in (tmp_path / "r1.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("args, message", [
    (["--run", "fig", "--step", "99", "-o", "x.html"], "no analysed step 99"),
    (["--run", "nope", "-o", "x.html"], "no run named 'nope'"),
    (["--run", "fig", "-o", "x.png"], "must end in .html"),
])
def test_bad_requests_get_one_error_line(run_cli, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    ingest_fig(run_cli, tmp_path, analyze=True)
    assert_one_error_line(run_cli("export", "html", *args), message)


def test_unanalysed_run_says_to_analyze(run_cli, tmp_path):
    ingest_fig(run_cli, tmp_path, analyze=False)
    result = run_cli("export", "html", "--run", "fig", "-o", str(tmp_path / "x.html"))
    assert_one_error_line(result, "analyze --run fig")


def test_charts_draw_in_headless_chromium_without_javascript_errors(report):
    path, done = report
    page = render(path, chromium_or_skip())
    assert page.errors == []
    # every chart div got plotly's SVG drawn into it
    drawn = re.findall(r'<div id="chart-(\d+)".*?class="main-svg"', page.dom, flags=re.S)
    assert len(set(drawn)) == done["charts"]
    assert page.dom.count('class="main-svg"') >= done["charts"]


def test_the_render_check_sees_a_javascript_error(tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert any("undefinedFunction" in e for e in render(broken, chromium_or_skip()).errors)


# ---- the real traces ---------------------------------------------------------------------

def test_nccl_report_draws(shared_traces, tmp_path):
    with Warehouse(tmp_path / "n.duckdb") as wh:
        wh.ingest([shared_traces / "nccl.json.gz"], run="nccl")
        wh.analyze(run="nccl")
        done = wh.export_html(tmp_path / "nccl.html", run="nccl")
    text = (tmp_path / "nccl.html").read_text(encoding="utf-8")
    # the views HTA users look for, from the saved reports of the same names
    for title in ("GPU time: temporal breakdown per rank", "GPU idle time by cause, per stream",
                  "Kernel breakdown of rank 0", "Communication overlapped by compute, per rank",
                  "GPU queue length per stream"):
        assert title in text
    assert "Cross-rank" not in text  # one rank: nothing to wait for
    page = render(tmp_path / "nccl.html", chromium_or_skip())
    assert page.errors == [] and page.dom.count('class="main-svg"') >= done["charts"]


# ---- what-if -----------------------------------------------------------------------------

def test_whatif_section_appears_only_when_the_run_has_scenarios(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([two_rank_folder(tmp_path / "fig")], run="fig")
        wh.analyze()
        wh.export_html(tmp_path / "before.html", run="fig")
        assert "What-if" not in (tmp_path / "before.html").read_text(encoding="utf-8")
        label = wh.sql("SELECT label FROM critical_path JOIN nodes USING (run_id, rank, step, method, node_id) "
                       "WHERE method = 'ctda' AND nodes.kind = 'cpu' ORDER BY counted_us DESC LIMIT 1").fetchall()[0][0]
        wh.whatif(run="fig", scale={f"cpu_op:{label}": 0.5}, name="half the top op")
        done = wh.export_html(tmp_path / "after.html", run="fig")
    text = (tmp_path / "after.html").read_text(encoding="utf-8")
    assert "What-if: measured and predicted step time per scenario" in text
    assert "What-if: the biggest changes on the predicted path" in text
    assert '"name":"predicted"' in text and "half the top op" in text
    assert sorted(int(i) for i in CHART_DIV.findall(text)) == list(range(done["charts"]))
    if find_chromium() is not None:
        page = render(tmp_path / "after.html", find_chromium())
        assert page.errors == [] and page.dom.count('class="main-svg"') >= done["charts"]


# ---- cross-rank: a recorded 2-rank run with a straggler -----------------------------------

STRAGGLER = Path(__file__).parents[1] / "data" / "gloo" / "straggler"


def test_two_rank_report_has_a_cross_rank_section_that_draws(tmp_path):
    with Warehouse(tmp_path / "s.duckdb") as wh:
        wh.ingest([STRAGGLER], run="straggler")
        wh.analyze()
        waited = wh.sql("SELECT count(DISTINCT step) FROM collective_instances WHERE matched AND wait_us > 0"
                        ).fetchall()[0][0]
        crossing = wh.sql("SELECT count(DISTINCT node_rank) FROM critical_path WHERE method = 'cross_rank'"
                          ).fetchall()[0][0]
        done = wh.export_html(tmp_path / "s.html", run="straggler")
    assert waited >= 2 and crossing == 2
    text = (tmp_path / "s.html").read_text(encoding="utf-8")
    for title in ("Cross-rank: who everyone waited for, per step", "Cross-rank: collective skew",
                  "across ranks"):
        assert title in text
    assert '"name":"waited for rank 1"' in text and '"name":"path crosses ranks"' in text
    page = render(tmp_path / "s.html", chromium_or_skip())
    assert page.errors == []
    drawn = set(re.findall(r'<div id="chart-(\d+)".*?class="main-svg"', page.dom, flags=re.S))
    assert len(drawn) == done["charts"]
    # the cross-rank path has a lane per rank on one axis
    path_chart = page.dom[page.dom.index("across ranks"):]
    assert 'data-unformatted="rank 0"' in path_chart and 'data-unformatted="rank 1"' in path_chart


def test_gantt_legend_sits_above_the_plot_clear_of_the_axis_title(report):
    path, done = report
    text = path.read_text(encoding="utf-8")
    # every legend of the report is anchored to the top of its figure
    layouts = re.findall(r'"legend":\{[^}]*\}', text)
    assert layouts and all('"yanchor":"top"' in legend and '"yref":"container"' in legend for legend in layouts)


# ---- hostile names (issue 35, item 1) -----------------------------------------------------

class _Requests(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).seen.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def hostile_folder(folder: Path, port: int) -> dict[str, str]:
    """The two-rank figure-1 run with names that are markup plotly would render."""
    names = {
        "aten::linear": f'<a href="http://127.0.0.1:{port}/link">linear</a>',
        "aten::mse_loss": f'<span style="mask:url(http://127.0.0.1:{port}/mask)">loss</span>',
        "aten::add_": f'<b style="background-image:url(http://127.0.0.1:{port}/bg)">add</b>',
        "fwd_gemm": f'<img src="http://127.0.0.1:{port}/img">gemm',
    }
    two_rank_folder(folder)
    for file in folder.glob("*.json"):
        trace = json.loads(file.read_text())
        for event in trace["traceEvents"]:
            event["name"] = names.get(event.get("name"), event.get("name"))
        file.write_text(json.dumps(trace))
    return names


def test_hostile_names_stay_text_and_fetch_nothing(tmp_path):
    binary = chromium_or_skip()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Requests)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        names = hostile_folder(tmp_path / "fig", port)
        run = "evil\u202elmth.exe"
        with Warehouse(tmp_path / "w.duckdb") as wh:
            wh.ingest([tmp_path / "fig"], run=run)
            wh.analyze()
            wh.whatif(run=run, scale={f"cpu_op:{names['aten::linear']}": 0.5},
                      name=f'<a href="http://127.0.0.1:{port}/scenario">half</a>')
            wh.export_html(tmp_path / "evil.html", run=run)
        page = render(tmp_path / "evil.html", binary)
    finally:
        server.shutdown()
        server.server_close()
    assert page.errors == []
    assert _Requests.seen == []  # nothing was fetched
    svg = "".join(re.findall(r'<svg class="main-svg".*?</svg>', page.dom, flags=re.S))
    assert svg and f"127.0.0.1:{port}" in svg  # the names are drawn ...
    assert not re.search(r"<a\b[^>]*href", svg)  # ... as text: no live link
    assert not re.search(r'<[^<>]*\bstyle="[^"]*url\(', svg)  # and no style attribute that loads anything
    assert "&lt;a href=" in svg and "&lt;span style=" in svg
    # the run name's bidi override is written out: it reverses nothing in the heading
    heading = re.search(r"<h1>(.*?)</h1>", page.dom, flags=re.S).group(1)
    assert "\u202e" not in page.dom.split("<body")[1].split("<script")[0]
    assert "evil&lt;U+202E&gt;lmth.exe" in heading


# ---- --compare: the path diff against another run ----------------------------------------

def _compared(tmp_path, loading_name: str = "data_loading"):
    """Run `with_loading` (10 ms of `loading_name` a step) and `without` it, analysed."""
    from helpers.pairs import training_trace

    wh = Warehouse(tmp_path / "w.duckdb")
    with_loading = training_trace(data_loading_us=10_000)
    for event in with_loading.events:
        if event.get("name") == "data_loading":
            event["name"] = loading_name
    wh.ingest([with_loading.write(tmp_path / "a.json")], run="with_loading")
    wh.ingest([training_trace().write(tmp_path / "b.json")], run="without")
    wh.analyze()
    return wh


def _diff_table(text: str) -> list[list[str]]:
    table = re.search(r'<table class="diff">(.*?)</table>', text, flags=re.S).group(1)
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table)]


def test_compare_adds_the_path_diff_as_a_chart_and_a_table_that_adds_up(tmp_path):
    from ctda_sql.export.html import write_html

    with _compared(tmp_path) as wh:
        done = write_html(wh.con, tmp_path / "b.html", run="without", compare="with_loading")
    text = (tmp_path / "b.html").read_text(encoding="utf-8")
    assert done["compare"] == "with_loading"
    assert "<h2>Why this run's median step differs from with_loading's, along the critical paths</h2>" in text
    assert sorted(int(i) for i in CHART_DIV.findall(text)) == list(range(done["charts"]))
    # the bar chart: a bar per row, then the remainder
    chart = text[text.index('<div id="chart-0"'):text.index('<div id="chart-1"')]
    assert '"y":["annotation \\u00b7 data_loading","annotation \\u00b7 Optimizer.step#SGD.step",' \
           '"annotation \\u00b7 compute","not on the path"]' in chart
    # the table: the rows with both runs' time, the remainder, the steps (14.36 ms a step with
    # the loading, 4.36 without); the changes add up to the step's
    assert _diff_table(text) == [
        ["kind", "label", "with_loading, ms", "without, ms", "change, ms"],
        ["annotation", "data_loading", "10.000", "0.000", "-10.000"],
        ["annotation", "Optimizer.step#SGD.step", "0.300", "0.300", "+0.000"],
        ["annotation", "compute", "4.000", "4.000", "+0.000"],
        ["unexplained", "not on the path (gaps, slack)", "0.060", "0.060", "+0.000"],
        ["step", "median step", "14.360", "4.360", "-10.000"]]


def test_the_diff_table_sums_the_rows_past_the_ones_it_shows(tmp_path, monkeypatch):
    from ctda_sql.export import html

    monkeypatch.setattr(html, "DIFF_ROWS", 1)
    with _compared(tmp_path) as wh:
        html.write_html(wh.con, tmp_path / "b.html", run="without", compare="with_loading")
    rows = _diff_table((tmp_path / "b.html").read_text(encoding="utf-8"))
    assert [row[1] for row in rows] == ["label", "data_loading", "2 other rows", "not on the path (gaps, slack)",
                                        "median step"]
    assert rows[2][2:] == ["4.300", "4.300", "+0.000"]


def test_the_compare_section_draws_in_headless_chromium(tmp_path):
    from ctda_sql.export.html import write_html

    binary = chromium_or_skip()
    with _compared(tmp_path) as wh:
        done = write_html(wh.con, tmp_path / "b.html", run="without", compare="with_loading")
    page = render(tmp_path / "b.html", binary)
    assert page.errors == []
    drawn = re.findall(r'<div id="chart-(\d+)".*?class="main-svg"', page.dom, flags=re.S)
    assert "0" in drawn and len(set(drawn)) == done["charts"]


def test_without_compare_there_is_no_diff_section(report):
    assert '<table class="diff">' not in report[0].read_text(encoding="utf-8")


def test_compare_with_an_unknown_run_is_one_error(tmp_path):
    from ctda_sql.core.errors import CtdaError
    from ctda_sql.export.html import write_html

    with _compared(tmp_path) as wh, pytest.raises(CtdaError, match="no run named 'nosuch'"):
        write_html(wh.con, tmp_path / "x.html", run="without", compare="nosuch")
    assert not (tmp_path / "x.html").exists()


def test_a_hostile_annotation_name_stays_text_in_the_diff_table(tmp_path):
    from ctda_sql.export.html import write_html

    evil = '<img src="http://127.0.0.1:9/x" onerror="alert(1)">\u202e'
    with _compared(tmp_path, loading_name=evil) as wh:
        write_html(wh.con, tmp_path / "b.html", run="without", compare="with_loading")
    text = (tmp_path / "b.html").read_text(encoding="utf-8")
    rows = _diff_table(text)
    assert rows[1][1] == '&lt;img src="http://127.0.0.1:9/x" onerror="alert(1)"&gt;&lt;U+202E&gt;'
    assert "<img" not in text and "\u202e" not in text
