"""`ctda-sql export html`: one self-contained file whose charts draw in a browser."""

from __future__ import annotations

import os
import re

import pytest

from test_engine_figures import figure1_trace
from test_export_overlay import assert_one_error_line, ingest_fig, two_rank_folder
from warehouse import Warehouse
from warehouse.chromium import find_chromium, render

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


def chromium_or_skip() -> str:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return binary


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
