"""`ctda-sql advise`: the findings, their replayed savings and the causal profile, against
hand-made traces whose answer is derived by hand and against recorded before/after pairs
where the fix was applied for real (docs/advice.md has the table)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import pytest

from ctda_sql.advice.advise import advise, rule_names
from ctda_sql.api import Warehouse
from ctda_sql.core.errors import CtdaError
from ctda_sql.testing.tracebuilder import TraceBuilder

DATA = Path(__file__).parents[1] / "data"
RULES = {"data_loading", "host_sync", "pageable_memcpy", "launch_bound", "exposed_comm", "straggler",
         "pipeline_bubble", "optimizer", "unexplained_idle"}


@dataclass(frozen=True)
class Pair:
    before: list        # the repetitions of the variant with the pattern (paths)
    after: list         # the repetitions with the fix applied for real
    rule: str           # the finding that must come first on `before`


def _reps(folder: str, variant: str) -> list[Path]:
    return [DATA / folder / f"{variant}-r{i}.json.gz" for i in (1, 2, 3)]


PAIRS = {
    "data loading removed (CPU)": Pair(_reps("whatif", "stall20"), _reps("whatif", "stall0"), "data_loading"),
    "host syncs removed (CUDA)": Pair(_reps("advice", "hostsync"), _reps("advice", "nosync"), "host_sync"),
    "pinned, non-blocking copies (CUDA)": Pair(_reps("advice", "pageable"), _reps("advice", "pinned"),
                                               "pageable_memcpy"),
    "foreach/fused optimizer (CPU)": Pair(_reps("advice", "optsgd_loop"), _reps("advice", "optsgd_foreach"),
                                          "optimizer"),
    "fused optimizer (CUDA)": Pair(_reps("advice", "foreach"), _reps("advice", "fused"), "optimizer"),
    "the straggler's stall removed (2 gloo ranks)": Pair([DATA / "gloo" / "straggler"], [DATA / "gloo" / "balanced"],
                                                         "straggler"),
    "the slow pipeline stage balanced (2 gloo ranks)": Pair(
        [DATA / "gloo_pairs" / f"pipeline_slow-{i}" for i in (1, 2, 3)],
        [DATA / "gloo_pairs" / f"pipeline-{i}" for i in (1, 2, 3)], "pipeline_bubble"),
}
# a faster network: 2 gloo ranks over a loopback shaped to 400, then 800 Mbit/s (2 repetitions)
PAIRS["twice the link's rate (2 gloo ranks, shaped)"] = Pair(
    [DATA / "shaped" / f"r2-400m-{i}" for i in (1, 2)], [DATA / "shaped" / f"r2-800m-{i}" for i in (1, 2)],
    "exposed_comm")
# the launch-bound pair: the eager step vs the same step replayed from a CUDA graph
PAIRS["CUDA graph (CUDA)"] = Pair(_reps("advice", "launchbound"), _reps("advice", "graphed"), "launch_bound")


def _job_median(wh: Warehouse, run: str) -> float:
    """The run's median job step (the slowest rank's window per step)."""
    return wh.con.execute("SELECT median(step_us) FROM (SELECT step, max(window_us) AS step_us FROM analysis_windows "
                  "JOIN runs AS r USING (run_id) WHERE r.name = $run GROUP BY step)", {"run": run}).fetchone()[0]


@pytest.fixture(scope="module")
def pairs_db(tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("advice") / "pairs.duckdb")
    for pair in PAIRS.values():
        for path in pair.before + pair.after:
            name = _name(path)
            if not wh.con.execute("SELECT count(*) FROM runs WHERE name = $n", {"n": name}).fetchone()[0]:
                wh.ingest([path], run=name, show_progress=False)
                wh.analyze(run=name)
    yield wh
    wh.close()


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('.json.gz')}"


@pytest.mark.parametrize("case", list(PAIRS))
def test_the_top_finding_names_the_applied_fix_and_predicts_its_saving(pairs_db, case):
    pair = PAIRS[case]
    before = [_job_median(pairs_db, _name(p)) for p in pair.before]
    after = [_job_median(pairs_db, _name(p)) for p in pair.after]
    measured_saving = median(before) - median(after)
    # the runs' own noise: the spread of the repetitions of each variant
    noise = max(max(before) - min(before), max(after) - min(after))
    document = advise(pairs_db.con, run=_name(pair.before[0]), persist=False)
    top = document["findings"][0]
    assert top["rule"] == pair.rule, document["findings"]
    bound = max(0.15 * measured_saving, noise)
    assert abs(top["saving_us"] - measured_saving) <= bound, (top, measured_saving, bound)


def _stall_trace(path: Path, stall_us: float, steps: int = 4) -> Path:
    """One thread: each 1000 us step is a `data_loading` annotation of `stall_us` with nothing in
    it (a sleep), then 1000 - stall_us of one op."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    for i in range(steps):
        start = i * 1000
        b.step(i + 1, main, ts=start, dur=1000)
        b.annotation(main, "data_loading", ts=start + 1, dur=stall_us - 1)
        b.cpu_op(main, "aten::mm", ts=start + stall_us, dur=1000 - stall_us - 1)
    return b.write(path)


def test_a_hand_made_data_loading_stall_is_found_and_its_removal_saves_its_time(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([_stall_trace(tmp_path / "t.json.gz", 400)], run="stall", show_progress=False)
        wh.analyze(run="stall")
        document = wh.advise(run="stall")
    top = document["findings"][0]
    # by hand: 399 us of the 1000 us step is the stall; removing it leaves the op (599 us)
    assert top["rule"] == "data_loading"
    assert top["scenario"] == "--scale user_annotation:data_loading=0"
    assert top["path_us"] == pytest.approx(399, abs=2)
    assert top["saving_us"] == pytest.approx(400, abs=3)
    zero = {p["label"]: p for p in document["profile"]}["data_loading"]
    assert zero["saving_at_half_us"] == pytest.approx(200, abs=3)
    assert zero["saving_at_zero_us"] == pytest.approx(400, abs=3)


def test_the_document_follows_the_contract_and_is_stored(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([_stall_trace(tmp_path / "t.json.gz", 400)], run="stall", show_progress=False)
        wh.analyze(run="stall")
        document = wh.advise(run="stall")
        stored = wh.sql("SELECT rule, saving_us FROM advice_findings ORDER BY place").fetchall()
        report = wh.report("advice", run="stall").fetchall()
    assert {"run", "step_us", "findings", "profile"} <= set(document)
    for finding in document["findings"]:
        assert {"rule", "title", "fix", "evidence", "scenario", "saving_us", "saving_share", "steps",
                "ranks"} <= set(finding)
        assert finding["rule"] in RULES
    savings = [f["saving_us"] for f in document["findings"] if f["saving_us"] is not None]
    assert savings == sorted(savings, reverse=True)
    for p in document["profile"]:
        assert {"label", "kind", "path_us", "saving_at_half_us", "saving_at_zero_us"} <= set(p)
    assert stored == [(f["rule"], f["saving_us"]) for f in document["findings"]]
    assert len(report) == len(stored)


def test_every_rule_is_a_sql_file_with_a_stable_id():
    assert set(rule_names()) == RULES


def test_the_scenario_replays_to_the_finding_saving_through_the_whatif_cli(tmp_path):
    db = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        wh.ingest([_stall_trace(tmp_path / "t.json.gz", 400)], run="stall", show_progress=False)
        wh.analyze(run="stall")
        top = wh.advise(run="stall")["findings"][0]
    out = subprocess.run([sys.executable, "-m", "ctda_sql.shell.entry", "whatif", "--db", str(db), "--run", "stall",
                          *__import__("shlex").split(top["scenario"]), "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    steps = json.loads(out)["steps"]
    savings = sorted(s["replay_us"] - s["predicted_us"] for s in steps)
    assert median(savings) == pytest.approx(top["saving_us"], abs=0.01)


def test_several_runs_without_run_is_one_clear_error(tmp_path):
    db = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        for name, stall in (("a", 300), ("b", 200)):  # two traces: the same file twice is one run
            wh.ingest([_stall_trace(tmp_path / f"{name}.json.gz", stall)], run=name, show_progress=False)
        wh.analyze()
        with pytest.raises(CtdaError, match="give --run NAME"):
            wh.advise()
    result = subprocess.run([sys.executable, "-m", "ctda_sql.shell.entry", "advise", "--db", str(db)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: the warehouse has 2 runs: give --run NAME; runs: a, b"]


def test_advise_json_is_one_document(tmp_path):
    db = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        wh.ingest([_stall_trace(tmp_path / "t.json.gz", 400)], run="stall", show_progress=False)
        wh.analyze(run="stall")
    out = subprocess.run([sys.executable, "-m", "ctda_sql.shell.entry", "advise", "--db", str(db), "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    document = json.loads(out)
    assert document["run"] == "stall" and document["findings"][0]["rule"] == "data_loading"


def test_the_shell_advises_and_diffs(tmp_path):
    db = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        for name, stall in (("slow", 400), ("fast", 100)):
            wh.ingest([_stall_trace(tmp_path / f"{name}.json.gz", stall)], run=name, show_progress=False)
        wh.analyze()
    batch = ".mode csv\n.advise --run slow --top 1\n.diff --run-a slow --run-b fast\n"
    result = subprocess.run([sys.executable, "-m", "ctda_sql.shell.entry", "--db", str(db)], input=batch,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "place,rule,saving_us,saving_share,path_us,fix,scenario"
    assert lines[1].startswith("1,data_loading,")
    diff_rows = lines[lines.index("kind,label,a_us,b_us,delta_us") + 1:]
    # by hand: the stall shrank by 300 us a step
    assert diff_rows[0].startswith("annotation,data_loading,") and float(diff_rows[0].split(",")[-1]) == pytest.approx(-300, abs=3)


def test_the_shell_completes_advise_options_and_run_names(tmp_path):
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    from ctda_sql.ingest.load import ingest
    from ctda_sql.shell.app import open_state
    from ctda_sql.shell.catalog import Catalog
    from ctda_sql.shell.completion import WarehouseCompleter

    state = open_state(str(tmp_path / "c.duckdb"))
    with state.holding(write=True):
        ingest(state.con, [_stall_trace(tmp_path / "t.json.gz", 300)], run_name="nightly_run", show_progress=False)
    completer = WarehouseCompleter(Catalog(state.con, state.holding))

    def candidates(text: str) -> list[str]:
        return [c.text for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]

    assert ".advise" in candidates(".adv")
    assert "--run" in candidates(".advise --r")
    assert candidates(".advise --run nig") == ["nightly_run"]
    assert candidates(".diff --run-b nig") == ["nightly_run"]
    state.con.close()


def test_whatif_drop_syncs_predicts_the_step_without_its_host_syncs(tmp_path):
    """hostsync reads each micro-batch's loss with .item(); nosync is the same step without:
    --drop-syncs from the first predicts the second within 5% (measured on an H200)."""
    db = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        for variant in ("hostsync", "nosync"):
            wh.ingest([DATA / "advice" / f"{variant}-r1.json.gz"], run=variant, show_progress=False)
        wh.analyze()
        truth = _job_median(wh, "nosync")
    out = subprocess.run([sys.executable, "-m", "ctda_sql.shell.entry", "whatif", "--db", str(db), "--run", "hostsync",
                          "--drop-syncs", "--format", "json"], capture_output=True, text=True, check=True).stdout
    predicted = median(s["predicted_us"] for s in json.loads(out)["steps"])
    assert predicted == pytest.approx(truth, rel=0.05)


def test_the_html_report_opens_with_the_stored_advice(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([_stall_trace(tmp_path / "t.json.gz", 400)], run="stall", show_progress=False)
        wh.analyze(run="stall")
        wh.export_html(tmp_path / "before.html", run="stall")
        wh.advise(run="stall")
        wh.export_html(tmp_path / "after.html", run="stall")
    before = (tmp_path / "before.html").read_text()
    after = (tmp_path / "after.html").read_text()
    assert "What to fix first" not in before  # an export never runs the replay itself
    advice_at = after.index("What to fix first")
    assert advice_at < after.index("Critical-path coverage per step")  # at the top
    table = after[after.index('<table class="advice">'):]
    assert "data_loading" in table[:table.index("</table>")]
    assert "0.40 ms" in table[:table.index("</table>")]  # the saving derived by hand: 400 us


def test_the_html_cross_rank_part_names_what_made_the_late_rank_late(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([DATA / "gloo" / "straggler"], run="straggler", show_progress=False)
        wh.analyze(run="straggler")
        wh.export_html(tmp_path / "s.html", run="straggler")
    page = (tmp_path / "s.html").read_text()
    late = page[page.index('<table class="late">'):]
    first_row = late[late.index("<tr><td>"):late.index("</tr>", late.index("<tr><td>"))]
    assert "<td>1</td>" in first_row and "slow_rank" in first_row


def test_the_advice_section_draws_in_headless_chromium(tmp_path):
    import re

    from ctda_sql.export.chromium import render

    from helpers.cli import chromium_or_skip

    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([_stall_trace(tmp_path / "t.json.gz", 400)], run="stall", show_progress=False)
        wh.analyze(run="stall")
        wh.advise(run="stall")
        done = wh.export_html(tmp_path / "r.html", run="stall")
    page = render(tmp_path / "r.html", chromium_or_skip())
    assert page.errors == []
    drawn = re.findall(r'<div id="chart-(\d+)".*?class="main-svg"', page.dom, flags=re.S)
    assert len(set(drawn)) == done["charts"]


def test_export_html_compare_on_the_command_line(tmp_path):
    db = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        for name, stall in (("slow", 400), ("fast", 100)):
            wh.ingest([_stall_trace(tmp_path / f"{name}.json.gz", stall)], run=name, show_progress=False)
        wh.analyze()
    subprocess.run([sys.executable, "-m", "ctda_sql.shell.entry", "export", "html", "--db", str(db), "--run", "fast",
                    "--compare", "slow", "-o", str(tmp_path / "r.html")], check=True, capture_output=True)
    page = (tmp_path / "r.html").read_text()
    assert "differs from slow" in page and "data_loading" in page


# the region each pair's fix changed, as the causal profile and the diff name it
CHANGED_REGION = {
    "data loading removed (CPU)": "data_loading",
    "foreach/fused optimizer (CPU)": "Optimizer.step#Adam.step",
    "the straggler's stall removed (2 gloo ranks)": "slow_rank",
    "the slow pipeline stage balanced (2 gloo ranks)": "slow_stage",
}


@pytest.mark.parametrize("case", list(CHANGED_REGION))
def test_the_profile_entry_of_the_changed_region_predicts_the_measured_run(pairs_db, case):
    """Where the fix removes a region whole, its causal-profile entry at zero predicts the
    measured saving within max(15%, noise)."""
    pair = PAIRS[case]
    before = [_job_median(pairs_db, _name(p)) for p in pair.before]
    after = [_job_median(pairs_db, _name(p)) for p in pair.after]
    measured = median(before) - median(after)
    noise = max(max(before) - min(before), max(after) - min(after))
    document = advise(pairs_db.con, run=_name(pair.before[0]), persist=False, profile_top=12)
    entry = next(p for p in document["profile"] if p["label"] == CHANGED_REGION[case])
    if case.startswith("foreach"):  # the fix leaves a fifth of the step: compare the half-time entry
        assert entry["saving_at_half_us"] < measured < entry["saving_at_zero_us"]
        return
    assert abs(entry["saving_at_zero_us"] - measured) <= max(0.15 * measured, noise), (entry, measured)


@pytest.mark.parametrize("case", list(CHANGED_REGION))
def test_the_diff_puts_the_measured_difference_on_the_changed_region(pairs_db, case):
    from ctda_sql.advice.diff import diff

    pair = PAIRS[case]
    document = diff(pairs_db.con, _name(pair.before[0]), _name(pair.after[0]))
    on_region = sum(r["delta_us"] for r in document["rows"] if CHANGED_REGION[case] in r["label"])
    assert on_region / document["delta_us"] >= 0.8, (document["delta_us"], on_region, document["rows"][:5])


def _sync_trace(path: Path, steps: int = 4) -> Path:
    """Each 812 us step: a 400 us kernel launched at 0 (runs 10-410), a cudaStreamSynchronize
    from 20 that returns at 412, then 399 us of CPU work (412-811) that waited for nothing but
    the sync."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.stream(7)
    for i in range(steps):
        t = i * 812
        b.step(i + 1, main, ts=t, dur=812)
        b.cpu_op(main, "aten::relu", ts=t + 1, dur=9)
        b.launch(main, ts=t + 2, dur=7, kernel="relu_kernel", stream=7, kernel_ts=t + 10, kernel_dur=400)
        b.cpu_op(main, "aten::item", ts=t + 20, dur=392)
        b.runtime(main, "cudaStreamSynchronize", ts=t + 21, dur=390)
        b.cpu_op(main, "aten::mul", ts=t + 412, dur=399)
    return b.write(path)


def test_a_hand_made_host_sync_is_found_and_dropping_it_overlaps_the_cpu_work(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([_sync_trace(tmp_path / "t.json.gz")], run="sync", show_progress=False)
        wh.analyze(run="sync")
        document = wh.advise(run="sync")
    top = document["findings"][0]
    assert top["rule"] == "host_sync" and top["scenario"] == "--drop-syncs"
    assert top["top_events"] == ["aten::item"]
    # by hand: the CPU sat 390 us in the sync; without it aten::mul runs from 21 to 420 beside the
    # kernel (10-410), so the step ends at ~420 instead of 812: ~390 us saved
    assert top["path_us"] == pytest.approx(390, abs=5)
    assert top["saving_us"] == pytest.approx(390, abs=15)


def _optimizer_trace(path: Path, foreach: bool, steps: int = 4) -> Path:
    """Each 1000 us step (CPU only): 399 us of aten::mm, then Optimizer.step#SGD.step over
    400-999 running 20 per-tensor aten::add_ of 29 us (or, with foreach, one aten::_foreach_add_)."""
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    for i in range(steps):
        t = i * 1000
        b.step(i + 1, main, ts=t, dur=1000)
        b.cpu_op(main, "aten::mm", ts=t + 1, dur=399)
        b.annotation(main, "Optimizer.step#SGD.step", ts=t + 400, dur=599)
        if foreach:
            b.cpu_op(main, "aten::_foreach_add_", ts=t + 401, dur=580)
        else:
            for k in range(20):
                b.cpu_op(main, "aten::add_", ts=t + 401 + 29 * k, dur=28)
    return b.write(path)


def test_a_hand_made_tensor_by_tensor_optimizer_is_found_and_replayed_at_a_quarter(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for name, foreach in (("loop", False), ("foreach", True)):
            wh.ingest([_optimizer_trace(tmp_path / f"{name}.json.gz", foreach)], run=name, show_progress=False)
        wh.analyze()
        loop = wh.advise(run="loop")
        batched = wh.advise(run="foreach")
    top = loop["findings"][0]
    assert top["rule"] == "optimizer"
    assert top["scenario"] == "--scale 'Optimizer.step#SGD.step=0.25'"
    # by hand: the path runs through the annotation from 400 to the last add_'s end at 980, and
    # the main thread holds it on to the window's end (the last node is its own): the whole
    # annotation, 599 us with its untraced tail; at a quarter of its time it loses 3/4: ~449 us
    assert top["path_us"] == pytest.approx(599, abs=1)
    assert top["saving_us"] == pytest.approx(449, abs=10)
    # a step that already runs multi-tensor kernels gets no optimizer finding
    assert "optimizer" not in [f["rule"] for f in batched["findings"]]
