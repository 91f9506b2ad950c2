"""`ctda-sql analyze` as users run it: summary, re-runs, methods, windows, errors."""

from __future__ import annotations

from helpers.traces import figure1_trace


def ingest_figure1(run_cli, tmp_path, run="fig1"):
    builder = figure1_trace()
    # distinct bytes per run: an identical file is skipped as a re-ingest
    builder.events.append({"name": "process_name", "ph": "M", "ts": 0, "pid": 100, "tid": 0,
                           "args": {"name": run}})
    trace = builder.write(tmp_path / f"{run}.json")
    assert run_cli("ingest", "-q", str(trace), "--run", run).code == 0


def count(open_db, sql: str) -> int:
    con = open_db()
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def test_analyze_prints_coverage_per_method(run_cli, tmp_path):
    ingest_figure1(run_cli, tmp_path)
    result = run_cli("analyze", "-q")
    assert result.code == 0
    assert "analyzed 1 windows of 1 rank(s)" in result.out
    assert "ctda: mean CPCR" in result.out and "per_thread: mean CPCR" in result.out


def test_rerunning_replaces_earlier_results(run_cli, tmp_path, open_db):
    ingest_figure1(run_cli, tmp_path)
    run_cli("analyze", "-q")
    first = count(open_db, "SELECT count(*) FROM critical_path")
    run_cli("analyze", "-q")
    assert count(open_db, "SELECT count(*) FROM critical_path") == first


def test_one_method_leaves_the_other_alone(run_cli, tmp_path, open_db):
    ingest_figure1(run_cli, tmp_path)
    run_cli("analyze", "-q", "--method", "per_thread")
    assert count(open_db, "SELECT count(DISTINCT method) FROM critical_path") == 1
    run_cli("analyze", "-q", "--method", "ctda")
    assert count(open_db, "SELECT count(DISTINCT method) FROM critical_path") == 2


def test_run_filter_analyses_only_that_run(run_cli, tmp_path, open_db):
    ingest_figure1(run_cli, tmp_path, "a")
    ingest_figure1(run_cli, tmp_path, "bb")
    assert run_cli("analyze", "-q", "--run", "bb").code == 0
    names = open_db().execute(
        "SELECT DISTINCT r.name FROM critical_path JOIN runs r USING (run_id)").fetchall()
    assert names == [("bb",)]


def test_unknown_run_is_one_clear_line(run_cli, tmp_path):
    ingest_figure1(run_cli, tmp_path)
    result = run_cli("analyze", "--run", "nope")
    assert result.code == 1
    assert result.err.strip() == "error: no run named 'nope'; runs: fig1"


def test_empty_warehouse_says_to_ingest_first(run_cli):
    result = run_cli("analyze")
    assert result.code == 1 and "ingest" in result.err and "Traceback" not in result.err


def test_window_prefix_analyses_each_annotation_instance(run_cli, tmp_path, open_db):
    b = figure1_trace()
    main = b.thread(100)
    b.annotation(main, "[param|model|forward]", 100, 200)
    b.annotation(main, "[param|model|forward]", 300, 50)
    trace = b.write(tmp_path / "windows.json")
    run_cli("ingest", "-q", str(trace))
    assert run_cli("analyze", "-q", "--window", "[param|").code == 0
    windows = open_db().execute(
        "SELECT step, start_us, end_us - start_us FROM analysis_windows ORDER BY step").fetchall()
    assert [(w[0], round(w[2])) for w in windows] == [(1, 200), (2, 50)]


def test_hotspots_and_cpcr_reports_as_json(run_cli, tmp_path):
    import json

    ingest_figure1(run_cli, tmp_path)
    run_cli("analyze", "-q")
    hotspots = json.loads(run_cli("report", "hotspots", "--format", "json").out)
    assert {"name", "category", "path_us", "share_of_path", "share_of_total"} <= set(hotspots[0])
    assert abs(sum(h["share_of_path"] for h in hotspots) - 1) < 1e-9
    cpcr = json.loads(run_cli("report", "cpcr", "-p", "method=ctda", "--format", "json").out)
    assert len(cpcr) == 1 and 0 < cpcr[0]["cpcr"] <= 1
    assert {"run", "rank", "step", "method", "step_us", "path_us", "cpcr"} <= set(cpcr[0])


def test_no_split_starved_switch_reproduces_the_papers_gpu_nodes(run_cli, tmp_path, open_db):
    from helpers.traces import figure2_trace

    run_cli("ingest", "-q", str(figure2_trace().write(tmp_path / "fig2.json")))
    run_cli("analyze", "-q")
    split_nodes = count(open_db, "SELECT count(*) FROM nodes WHERE kind = 'gpu' AND method = 'ctda'")
    run_cli("analyze", "-q", "--no-split-starved")
    assert count(open_db, "SELECT count(*) FROM nodes WHERE kind = 'gpu' AND method = 'ctda'") == split_nodes - 1


def test_memory_limit_comes_from_the_environment(run_cli, tmp_path, monkeypatch, open_db):
    ingest_figure1(run_cli, tmp_path)
    monkeypatch.setenv("CTDA_MEMORY_LIMIT", "512MB")
    limit = open_db().execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit.replace(" ", "") in {"488.2MiB", "512.0MB", "488.2MB"}


def test_a_bad_memory_limit_is_one_clear_line(run_cli, tmp_path, monkeypatch, open_db):
    ingest_figure1(run_cli, tmp_path)
    monkeypatch.setenv("CTDA_MEMORY_LIMIT", "lots'; DROP TABLE runs; --")
    result = run_cli("analyze")
    assert result.code == 1
    assert result.err.startswith("error: CTDA_MEMORY_LIMIT=") and "Traceback" not in result.err
    monkeypatch.delenv("CTDA_MEMORY_LIMIT")
    assert count(open_db, "SELECT count(*) FROM runs") == 1
