"""`ctda-sql export overlay`: the trace with the critical path marked opens in Perfetto /
chrome://tracing (valid Chrome trace JSON), keeps every event, and re-ingests."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from test_engine_figures import figure1_trace
from warehouse import Warehouse


def two_rank_folder(folder: Path) -> Path:
    """figure 1 as ranks 0 and 1 of one job: same pids, tids and flow ids in both files."""
    folder.mkdir()
    for rank in (0, 1):
        builder = figure1_trace()
        builder.rank, builder.world_size = rank, 2
        builder.events.append({"name": "process_name", "ph": "M", "ts": builder.base_ts,
                               "pid": builder.pid, "tid": 0, "args": {"name": "python"}})
        builder.events += [
            {"name": "fwdbwd", "cat": "fwdbwd", "ph": "s", "id": 7, "pid": builder.pid, "tid": 100,
             "ts": builder.base_ts + 150},
            {"name": "fwdbwd", "cat": "fwdbwd", "ph": "f", "bp": "e", "id": 7, "pid": builder.pid,
             "tid": 200, "ts": builder.base_ts + 400},
        ]
        builder.write(folder / f"rank-{rank}.json")
    return folder


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    folder = tmp_path_factory.mktemp("overlay")
    wh = Warehouse(folder / "w.duckdb")
    wh.ingest([two_rank_folder(folder / "fig")], run="fig")
    wh.analyze(run="fig")
    yield wh
    wh.close()


def read_trace(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def count(wh: Warehouse, sql: str, params=None) -> int:
    return wh.sql(sql, params).fetchall()[0][0]


def schema_problems(events: list[dict]) -> list[str]:
    """What would keep Perfetto or chrome://tracing from reading the events as written."""
    problems = []
    for index, e in enumerate(events):
        if not isinstance(e.get("ph"), str) or "pid" not in e or "name" not in e:
            problems.append(f"{index}: no ph/pid/name")
        elif not isinstance(e.get("ts"), (int, float)):
            problems.append(f"{index}: ts {e.get('ts')!r}")
        elif e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
            problems.append(f"{index}: X with dur {e.get('dur')!r}")
    return problems


def path_flows(events: list[dict]) -> tuple[Counter, Counter]:
    starts = Counter(e["id"] for e in events if e.get("cat") == "critical_path" and e["ph"] == "s")
    ends = Counter(e["id"] for e in events if e.get("cat") == "critical_path" and e["ph"] == "f")
    return starts, ends


def test_one_rank_keeps_every_event_and_adds_the_path(warehouse, tmp_path):
    done = warehouse.export_overlay(tmp_path / "r1.json.gz", run="fig", rank=1)
    trace = read_trace(tmp_path / "r1.json.gz")
    events = trace["traceEvents"]
    original = count(warehouse, "SELECT count(*) FROM events WHERE rank = 1")
    path_nodes = count(warehouse, "SELECT count(*) FROM critical_path WHERE rank = 1 AND method = 'ctda'")
    assert done["events"] == original and len(events) == original + done["added"]
    assert schema_problems(events) == []
    # every original event is there, by (name, ph) multiset
    stored = Counter(warehouse.sql("SELECT name, ph FROM events WHERE rank = 1").fetchall())
    written = Counter((e["name"], e["ph"]) for e in events if e.get("cat") != "critical_path")
    assert written - Counter({("process_name", "M"): 1, ("process_sort_index", "M"): 1,
                              ("thread_name", "M"): 1}) == stored
    slices = [e for e in events if e.get("cat") == "critical_path" and e["ph"] == "X"]
    assert len(slices) == path_nodes
    assert trace["distributedInfo"]["rank"] == 1 and trace["ctdaOverlay"]["ranks"] == [1]


def test_events_with_counted_time_carry_args_critical(warehouse, tmp_path):
    warehouse.export_overlay(tmp_path / "r0.json", run="fig", rank=0)
    events = read_trace(tmp_path / "r0.json")["traceEvents"]
    critical = sorted(e["name"] for e in events if (e.get("args") or {}).get("critical") == 1)
    counted = sorted(r[0] for r in warehouse.sql(
        "SELECT e.name FROM (SELECT DISTINCT event_id FROM path_events WHERE rank = 0 AND method = 'ctda') "
        "JOIN events e USING (event_id) WHERE e.rank = 0").fetchall())
    assert critical == counted
    assert "aten::linear" in critical and "ncclDevKernel_AllReduce" in critical
    assert "bwd_gemm" not in critical  # hidden behind the all-reduce: not on the path


def test_path_process_has_one_slice_per_node_in_path_order(warehouse, tmp_path):
    warehouse.export_overlay(tmp_path / "r0.json", run="fig", rank=0)
    events = read_trace(tmp_path / "r0.json")["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    path_pid = next(pid for pid, name in names.items() if name == "Critical path (ctda)")
    slices = [e for e in events if e["pid"] == path_pid and e["ph"] == "X"]
    rows = warehouse.sql("SELECT c.counted_us, n.phase, n.label, c.edge_type, c.gap_kind FROM critical_path c "
                         "JOIN nodes n USING (run_id, rank, step, method, node_id) "
                         "WHERE rank = 0 AND method = 'ctda' ORDER BY step, seq").fetchall()
    assert [(s["args"]["counted_us"], s["args"]["phase"], s["args"]["label"], s["args"]["edge_type"],
             s["args"]["gap_kind"]) for s in slices] == rows
    assert all(s["name"] == f"{s['args']['phase']} · {s['args']['label']}" for s in slices)
    # one row: the counted windows of a path never overlap
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-6 for a, b in zip(slices, slices[1:]))


def test_flows_join_consecutive_path_nodes_on_the_events_they_ran(warehouse, tmp_path):
    warehouse.export_overlay(tmp_path / "r0.json", run="fig", rank=0)
    events = read_trace(tmp_path / "r0.json")["traceEvents"]
    starts, ends = path_flows(events)
    # nodes that ran events on the path (a wait-return node of a bare sync call runs none)
    nodes = count(warehouse, "SELECT count(DISTINCT node_id) FROM path_events WHERE rank = 0 AND method = 'ctda'")
    assert starts == ends and set(starts.values()) == {1} and len(starts) == nodes - 1
    assert all(e.get("bp") == "e" for e in events if e.get("cat") == "critical_path" and e["ph"] == "f")
    marked = [e for e in events if e["ph"] == "X" and (e.get("args") or {}).get("critical") == 1]
    for flow in (e for e in events if e.get("cat") == "critical_path" and e["ph"] in "sf"):
        assert any(m["pid"] == flow["pid"] and m["tid"] == flow["tid"]
                   and m["ts"] <= flow["ts"] <= m["ts"] + m["dur"] for m in marked), flow
    # new flow ids do not collide with the trace's own
    own = {e["id"] for e in events if e["ph"] in "sf" and e.get("cat") != "critical_path"}
    assert own and not own & set(starts)


def test_all_ranks_in_one_file_keep_ranks_apart(warehouse, tmp_path):
    done = warehouse.export_overlay(tmp_path / "all.json.gz", run="fig", methods="all")
    events = read_trace(tmp_path / "all.json.gz")["traceEvents"]
    assert done["ranks"] == [0, 1] and len(events) == done["events"] + done["added"]
    assert schema_problems(events) == []
    kineto = [e for e in events if e.get("cat") != "critical_path" and e["ph"] != "M"]
    pids = [{e["pid"] for e in kineto if e["ph"] == "X" and e["name"] == name}
            for name in ("aten::linear", "fwd_gemm")]
    assert all(len(p) == 2 for p in pids)  # one process per rank for the same CPU and GPU lanes
    own_flows = Counter(e["id"] for e in kineto if e["ph"] == "s")
    assert len(own_flows) == 2 and set(own_flows.values()) == {1}  # flow id 7 of each rank stays apart
    names = sorted(e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name")
    assert names == ["Critical path (ctda)", "Critical path (per_thread)", "rank 0 · python", "rank 1 · python"]
    threads = sorted(e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
                     and str(e["args"]["name"]).startswith("rank"))
    assert threads == ["rank 0 (ctda)", "rank 0 (per_thread)", "rank 1 (ctda)", "rank 1 (per_thread)"]
    starts, ends = path_flows(events)
    assert starts == ends


def test_the_overlay_reingests_with_every_event(warehouse, tmp_path):
    done = warehouse.export_overlay(tmp_path / "r0.json.gz", run="fig", rank=0)
    with Warehouse(tmp_path / "again.duckdb") as again:
        result = again.ingest([tmp_path / "r0.json.gz"], run="again")
        assert result.loaded and not result.skipped
        assert count(again, "SELECT count(*) FROM events") == done["events"] + done["added"]
        assert count(again, "SELECT count(*) FROM steps WHERE NOT whole_trace") == 1


def test_cli_writes_the_overlay_and_says_how_to_open_it(run_cli, tmp_path):
    ingest_fig(run_cli, tmp_path, analyze=False)
    out = tmp_path / "o.json.gz"
    before = run_cli("export", "overlay", "--run", "fig", "-o", str(out))
    assert before.code == 1 and "analyze --run fig" in before.err and not out.exists()
    assert run_cli("analyze", "-q").code == 0
    result = run_cli("export", "overlay", "--run", "fig", "--rank", "1", "-o", str(out))
    assert result.code == 0, result.err
    assert "ui.perfetto.dev" in result.out and read_trace(out)["traceEvents"]


@pytest.mark.parametrize("args, message", [
    (["--run", "nope", "-o", "x.json"], "no run named 'nope'"),
    (["--run", "fig", "--rank", "5", "-o", "x.json"], "has no rank 5"),
    (["--run", "fig", "-o", "x.txt"], "must end in .json or .json.gz"),
    (["--run", "fig", "-o", "no/such/folder/x.json"], "no such folder"),
])
def test_bad_requests_get_one_error_line(run_cli, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    ingest_fig(run_cli, tmp_path, analyze=True)
    assert_one_error_line(run_cli("export", "overlay", *args), message)


def ingest_fig(run_cli, tmp_path: Path, analyze: bool) -> None:
    """The two-rank figure-1 run `fig` in the CLI's test database."""
    assert run_cli("ingest", "-q", str(two_rank_folder(tmp_path / "fig")), "--run", "fig").code == 0
    if analyze:
        assert run_cli("analyze", "-q").code == 0


def assert_one_error_line(result, message: str) -> None:
    assert result.code == 1 and result.err.startswith("error: ") and message in result.err
    assert len(result.err.strip().splitlines()) == 1


# ---- the real traces ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def shared(shared_traces, tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("overlay-shared") / "s.duckdb")
    wh.ingest([shared_traces / "nccl.json.gz"], run="nccl")
    wh.ingest([shared_traces / "two_ranks"], run="two_ranks")
    wh.analyze()
    yield wh
    wh.close()


@pytest.mark.parametrize("run", ["nccl", "two_ranks"])
def test_real_overlays_are_valid_and_reingest(shared, tmp_path, run):
    done = shared.export_overlay(tmp_path / f"{run}.json.gz", run=run, methods="all")
    events = read_trace(tmp_path / f"{run}.json.gz")["traceEvents"]
    assert schema_problems(events) == []
    starts, ends = path_flows(events)
    assert starts and starts == ends
    with Warehouse(tmp_path / "again.duckdb") as again:
        again.ingest([tmp_path / f"{run}.json.gz"], run="again")
        assert count(again, "SELECT count(*) FROM events") == done["events"] + done["added"]
