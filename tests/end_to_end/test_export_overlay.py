"""`ctda-sql export overlay`: the trace with the critical path marked opens in Perfetto /
chrome://tracing (valid Chrome trace JSON), keeps every event, and re-ingests."""

from __future__ import annotations

import errno
import gzip
import json
import os
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from ctda_sql import Warehouse

from helpers.cli import assert_one_error_line, ingest_fig
from helpers.traces import figure1_trace, two_rank_folder


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


def test_the_overlay_leaves_none_of_its_step_tables_on_the_connection(warehouse, tmp_path):
    """sql/export/overlay_events.sql makes private temp tables (one holds a row per input
    event) before its last SELECT: a session that exports keeps none of them."""
    warehouse.export_overlay(tmp_path / "all.json", run="fig", methods=["all"])
    assert count(warehouse, "SELECT count(*) FROM duckdb_tables() WHERE starts_with(table_name, '_overlay')") == 0


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
    assert done["methods"] == ["ctda", "per_thread", "cross_rank"]
    assert schema_problems(events) == []
    kineto = [e for e in events if not is_added(e) and e["ph"] != "M"]
    own_flows = Counter(e["id"] for e in kineto if e["ph"] == "s")
    assert len(own_flows) == 2 and set(own_flows.values()) == {1}  # flow id 7 of each rank stays apart
    names = sorted(e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name")
    # both ranks ran pid 1000 on GPU 0: each rank's processes are named by rank, the input's
    # name kept in brackets (issue 43, first use 3), the path processes beside them
    assert names == ["Critical path (cross_rank)", "Critical path (ctda)", "Critical path (per_thread)",
                     "rank 0 · GPU 0", "rank 0 · pid 1000 (python)", "rank 1 · GPU 0", "rank 1 · pid 1000 (python)"]
    threads = sorted(e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
                     and str(e["args"]["name"]).startswith("rank"))
    assert {"rank 0 (ctda)", "rank 0 (per_thread)", "rank 1 (ctda)", "rank 1 (per_thread)"} <= set(threads)
    assert any(t.endswith("(cross_rank)") for t in threads)
    starts, ends = path_flows(events)
    assert starts == ends


def node_folder(folder: Path, ranks: tuple[int, ...], cpu_pid: int = 1000) -> Path:
    """figure 1 as ranks of two nodes of one job: every rank runs GPU 0 (Kineto's GPU pid is
    the local device index, so rank 0 and rank 8 both write pid 0) and CPU pid `cpu_pid`."""
    folder.mkdir()
    for rank in ranks:
        builder = figure1_trace()
        builder.rank, builder.world_size = rank, 16
        for event in builder.events:  # figure 1 is built on CPU pid 1000 and GPU 0
            event["pid"] = cpu_pid if event["pid"] == builder.pid else event["pid"]
        builder.write(folder / f"rank-{rank}.json")
    return folder


def tracks_of_ranks(overlay: Path, sources: list[Path]) -> dict:
    """(pid, tid) -> the ranks whose input events the overlay draws on that track; the input
    events come first, in rank order, as many as each source holds."""
    events = read_trace(overlay)["traceEvents"]
    tracks, position = {}, 0
    for source in sources:
        rank = read_trace(source)["distributedInfo"]["rank"]
        for _ in read_trace(source)["traceEvents"]:
            event = events[position]
            position += 1
            if "pid" in event and event["ph"] != "M":
                tracks.setdefault((event["pid"], event.get("tid")), set()).add(rank)
    return tracks


@pytest.mark.parametrize("ranks, cpu_pid", [
    ((0, 8), 1000),            # pid + rank * 10^4: rank 8's GPU 0 becomes 80000
    ((0, 300), 4_000_000),     # pid + rank * 10^7 would pass 2e9: each rank's pids are numbered
])
def test_ranks_that_share_a_device_index_get_tracks_of_their_own(tmp_path, ranks, cpu_pid):
    """Issue 43, first use 3: ranks 0 and 8 of a 2-node job both write GPU 0 as pid 0, and
    their kernels shared one (pid, stream) track in Perfetto."""
    folder = node_folder(tmp_path / "job", ranks, cpu_pid)
    sources = [folder / f"rank-{rank}.json" for rank in ranks]
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([folder], run="job")
        wh.analyze(run="job")
        done = wh.export_overlay(tmp_path / "job.json", run="job")
    assert done["ranks"] == list(ranks)
    tracks = tracks_of_ranks(tmp_path / "job.json", sources)
    assert {track: sorted(owners) for track, owners in tracks.items() if len(owners) > 1} == {}
    # each rank's GPU stream 7 is a track of its own, and no pid reaches the path processes'
    gpu_tracks = [track for track in tracks if track[1] == 7]
    assert len(gpu_tracks) == len(ranks) == len(set(gpu_tracks)), gpu_tracks
    assert all(isinstance(pid, int) and 0 <= pid < 2_000_000_000 for pid, _ in tracks)
    # the file says which rank and device each pid is: in ctdaOverlay and in process names
    trace = read_trace(tmp_path / "job.json")
    stated = {(p["rank"], p["pid"]): p for p in trace["ctdaOverlay"]["pids"]}
    assert set(stated) == {(rank, pid) for rank in ranks for pid in (0, cpu_pid)}
    assert stated[(ranks[1], 0)]["track"] == f"rank {ranks[1]} · GPU 0"
    assert stated[(ranks[1], cpu_pid)]["track"] == f"rank {ranks[1]} · pid {cpu_pid}"
    assert trace["ctdaOverlay"]["pid_rule"]
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    for (rank, pid), entry in stated.items():
        assert names[entry["overlay_pid"]] == entry["track"]
        assert (entry["overlay_pid"], 7 if pid == 0 else 100) in tracks
        assert tracks[(entry["overlay_pid"], 7 if pid == 0 else 100)] == {rank}
    if ranks == (0, 8):
        assert trace["ctdaOverlay"]["pid_rule"] == "pid + rank * 10000"
        assert stated[(8, 0)]["overlay_pid"] == 80000 and stated[(0, 0)]["overlay_pid"] == 0
    # everything else is the input's, and the path's flows land on the moved tracks
    assert changed_input_events(sources, tmp_path / "job.json") == []
    starts, ends = path_flows(trace["traceEvents"])
    assert starts and starts == ends
    flow_tracks = {(e["pid"], e["tid"]) for e in trace["traceEvents"] if e.get("cat") == "critical_path"
                   and e["ph"] in "sf"}
    assert flow_tracks <= set(tracks)


def test_one_rank_of_a_multi_rank_run_keeps_its_pids(tmp_path):
    """A single-rank overlay is the trace as it was: no pid moves, no process is renamed."""
    folder = node_folder(tmp_path / "job", (0, 8))
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([folder], run="job")
        wh.analyze(run="job")
        wh.export_overlay(tmp_path / "r8.json", run="job", rank=8)
    trace = read_trace(tmp_path / "r8.json")
    assert "pids" not in trace["ctdaOverlay"] and "pid_rule" not in trace["ctdaOverlay"]
    assert changed_input_events([folder / "rank-8.json"], tmp_path / "r8.json") == []
    assert {e["pid"] for e in trace["traceEvents"] if e.get("cat") != "critical_path"
            and e["pid"] < 2_000_000_000} == {0, 1000}


def is_added(event: dict) -> bool:
    """An event the overlay adds: a path process's metadata or slice, or a path flow."""
    return event.get("cat") in ("critical_path", "cross_rank_path") or event.get("pid", 0) >= 2_000_000_000


def input_events(path: Path) -> list:
    """The traceEvents of a trace file, numbers read exactly (floats as Decimal)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle, parse_float=Decimal)["traceEvents"]


IDENTITY = ("name", "ph", "ts", "dur", "pid", "tid")


def moved_pids(overlay: Path) -> dict:
    """(rank, pid) -> (overlay pid, track name), as the overlay's metadata states them."""
    stated = read_trace(overlay)["ctdaOverlay"].get("pids", [])
    return {(p["rank"], p["pid"]): (p["overlay_pid"], p["track"]) for p in stated}


def changed_input_events(sources: list[Path], overlay: Path) -> list[str]:
    """How the overlay's copies of the input events differ from the input files (rank order):
    every key of IDENTITY present exactly when it was, with the same value and JSON type, and
    args the same but for HTA's `critical` mark. In a multi-rank overlay a pid may move only
    as the metadata says (ctdaOverlay.pids, the same JSON type), and a process_name event's
    name only to its track's name with the input's in brackets."""
    written, moved = input_events(overlay), moved_pids(overlay)
    problems, position = [], 0
    for source in sources:
        rank = read_trace(source).get("distributedInfo", {}).get("rank", 0)
        for index, original in enumerate(input_events(source)):
            copy = written[position]
            position += 1
            if "pid" in original and moved:
                pid = original["pid"]
                overlay_pid, track = moved[(rank, int(pid) if str(pid).isdigit() else pid)]
                original = {**original, "pid": str(overlay_pid) if isinstance(pid, str) else overlay_pid}
                if original.get("name") == "process_name" and isinstance(original.get("args"), dict):
                    name = original["args"].get("name")
                    original["args"] = {**original["args"], "name": track + (f" ({name})" if name else "")}
            for key in IDENTITY:
                if (key in original) != (key in copy) or (
                        key in original and (type(original[key]), original[key]) != (type(copy[key]), copy[key])):
                    problems.append(f"{source.name} event {index} {key}: {original.get(key, '<absent>')!r} "
                                    f"became {copy.get(key, '<absent>')!r}")
            args = copy.get("args")
            if isinstance(args, dict) and args.get("critical") == 1 and not (
                    isinstance(original.get("args"), dict) and "critical" in original["args"]):
                args = {k: v for k, v in args.items() if k != "critical"} or None
                if args is None and "args" in original:
                    args = {}
            if ("args" in original or args is not None) and original.get("args", None) != args:
                problems.append(f"{source.name} event {index} args: {original.get('args')!r} became {args!r}")
    return problems


def test_overlay_keeps_odd_input_events_as_they_were(tmp_path):
    """No `"cat": null` / `"dur": null` / `"args": null` added, a list args stays a list (even
    on the path), a string pid stays a string, integers stay integers."""
    builder = figure1_trace()
    builder.events += [
        {"name": "bare", "ph": "i", "ts": builder.base_ts + 50, "pid": builder.pid, "tid": 100, "s": "t"},
        {"name": "listed", "ph": "X", "ts": builder.base_ts + 960, "dur": 4, "pid": "1074", "tid": "7",
         "args": [1, 2]},
    ]
    for event in builder.events:  # the main thread's ops carry list args
        if event.get("name") == "aten::linear":
            event["args"] = ["a list", 1]
    source = builder.write(tmp_path / "odd.json")
    with Warehouse(tmp_path / "w.duckdb") as wh:
        wh.ingest([source], run="odd")
        wh.analyze(run="odd")
        wh.export_overlay(tmp_path / "odd-overlay.json", run="odd", methods="all")
        on_path = {r[0] for r in wh.sql("SELECT name FROM path_events WHERE method = 'ctda'").fetchall()}
    assert "aten::linear" in on_path
    assert changed_input_events([source], tmp_path / "odd-overlay.json") == []
    text = (tmp_path / "odd-overlay.json").read_text(encoding="utf-8")
    assert '"cat": null' not in text.replace('":null', '": null') and '"pid":"1074"' in text.replace(" ", "")


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


@pytest.mark.parametrize("kind", ["overlay", "html"])
def test_an_export_never_writes_over_the_warehouse(run_cli, db_path, tmp_path, kind):
    """Item 5 of issue 35: --db w.json with -o w.json printed "wrote" and the database was gone."""
    suffix = ".json" if kind == "overlay" else ".html"
    db = tmp_path / f"w{suffix}"
    assert run_cli("ingest", "-q", str(two_rank_folder(tmp_path / "fig")), "--run", "fig", db=db).code == 0
    assert run_cli("analyze", "-q", db=db).code == 0
    before = db.read_bytes()
    assert_one_error_line(run_cli("export", kind, "--run", "fig", "-o", str(db), db=db), "is the warehouse database")
    assert db.read_bytes() == before
    wal = tmp_path / f"w{suffix}.wal"
    result = run_cli("export", kind, "--run", "fig", "-o", str(wal), db=db)
    if kind == "overlay":  # a .wal name is no overlay name; the check on the name comes first
        assert_one_error_line(result, "must end in .json")
    lake = tmp_path / "lake"
    (lake / "events").mkdir(parents=True)
    (lake / "runs.parquet").write_bytes(b"PAR1")
    result = run_cli("export", kind, "--run", "fig", "-o", str(lake / "events" / f"x{suffix}"), db=db)
    assert_one_error_line(result, "is inside the lake")
    assert not (lake / "events" / f"x{suffix}").exists()


@pytest.mark.parametrize("kind", ["overlay", "html"])
def test_an_output_that_cannot_be_written_gets_one_error_line(run_cli, tmp_path, monkeypatch, kind):
    """Item 10 of issue 35: a folder, an unwritable folder, a full disk."""
    suffix = ".json" if kind == "overlay" else ".html"
    ingest_fig(run_cli, tmp_path, analyze=True)
    folder = tmp_path / f"a-folder{suffix}"
    folder.mkdir()
    assert_one_error_line(run_cli("export", kind, "--run", "fig", "-o", str(folder)), "is a folder")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if not os.access(locked, os.W_OK):  # root writes anywhere
            assert_one_error_line(run_cli("export", kind, "--run", "fig", "-o", str(locked / f"x{suffix}")),
                                  "cannot write there")
    finally:
        locked.chmod(0o700)
    # a full disk in the middle of the write: the report that was there stays whole
    good = tmp_path / f"good{suffix}"
    assert run_cli("export", kind, "--run", "fig", "-o", str(good)).code == 0
    before = good.read_bytes()

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if kind == "overlay":
        monkeypatch.setattr("ctda_sql.export.overlay._write_events", full_disk)
    else:
        monkeypatch.setattr("ctda_sql.export.html._write_page", full_disk)
    assert_one_error_line(run_cli("export", kind, "--run", "fig", "-o", str(good)), "No space left on device")
    assert good.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp file left


# ---- the real traces ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def shared(shared_traces, tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("overlay-shared") / "s.duckdb")
    wh.ingest([shared_traces / "nccl.json.gz"], run="nccl")
    wh.ingest([shared_traces / "ns_resolution.json.gz"], run="ns")
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


@pytest.mark.parametrize("run, files", [
    ("nccl", ["nccl.json.gz"]),
    ("ns", ["ns_resolution.json.gz"]),  # epoch microseconds with nanosecond digits
    ("two_ranks", ["two_ranks/rank-0.json.gz", "two_ranks/rank-1.json.gz"]),
])
def test_real_overlays_keep_every_input_event_exactly(shared, shared_traces, tmp_path, run, files):
    shared.export_overlay(tmp_path / "o.json.gz", run=run, methods="all")
    assert changed_input_events([shared_traces / f for f in files], tmp_path / "o.json.gz") == []
    # the marks are there: HTA's args.critical on the events with counted time
    marked = [e for e in read_trace(tmp_path / "o.json.gz")["traceEvents"]
              if isinstance(e.get("args"), dict) and e["args"].get("critical") == 1]
    assert marked


# ---- a recorded 2-rank run: the cross-rank path --------------------------------------------

STRAGGLER = Path(__file__).parents[1] / "data" / "gloo" / "straggler"


@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("overlay-straggler") / "s.duckdb")
    wh.ingest([STRAGGLER], run="straggler")
    wh.analyze()
    yield wh
    wh.close()


def test_two_rank_overlay_keeps_every_input_event_exactly(straggler, tmp_path):
    done = straggler.export_overlay(tmp_path / "s.json.gz", run="straggler", methods="all")
    assert done["ranks"] == [0, 1] and "cross_rank" in done["methods"]
    sources = sorted(STRAGGLER.glob("rank-*.json.gz"))
    assert changed_input_events(sources, tmp_path / "s.json.gz") == []
    # each rank's time base is its file's: the overlay starts where the input does
    trace = read_trace(tmp_path / "s.json.gz")
    assert "baseTimeNanoseconds" not in trace or trace["baseTimeNanoseconds"] == read_trace(
        sources[0]).get("baseTimeNanoseconds")


def test_cross_rank_path_is_drawn_with_flows_that_cross_ranks(straggler, tmp_path):
    straggler.export_overlay(tmp_path / "x.json", run="straggler", methods="cross_rank")
    events = read_trace(tmp_path / "x.json")["traceEvents"]
    rows = straggler.sql("SELECT count(*), count(DISTINCT node_rank) FROM critical_path "
                         "WHERE method = 'cross_rank'").fetchall()[0]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    path_pid = next(pid for pid, name in names.items() if name == "Critical path (cross_rank)")
    slices = [e for e in events if e["pid"] == path_pid and e["ph"] == "X"]
    assert len(slices) == rows[0] and len({s["tid"] for s in slices}) == rows[1] == 2
    # a flow joins consecutive path nodes; where the path changes rank, it joins the ranks' events
    # each rank's processes have pids of their own, which the file states
    pid_rank = {overlay_pid: rank for (rank, _), (overlay_pid, _) in moved_pids(tmp_path / "x.json").items()}
    assert set(pid_rank.values()) == {0, 1}
    starts = {e["id"]: e for e in events if e.get("cat") == "critical_path" and e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e.get("cat") == "critical_path" and e["ph"] == "f"}
    assert starts and starts.keys() == ends.keys()
    crossing = [i for i in starts if pid_rank[starts[i]["pid"]] != pid_rank[ends[i]["pid"]]]
    assert crossing
    # with --method all, ctda's path marks the events and the crossings get flows of their own
    straggler.export_overlay(tmp_path / "all.json", run="straggler", methods="all")
    every = read_trace(tmp_path / "all.json")["traceEvents"]
    assert any(e.get("cat") == "cross_rank_path" for e in every)


def test_cli_accepts_method_cross_rank(run_cli, tmp_path):
    assert run_cli("ingest", "-q", str(STRAGGLER), "--run", "straggler").code == 0
    assert run_cli("analyze", "-q").code == 0
    out = tmp_path / "x.json.gz"
    result = run_cli("export", "overlay", "--run", "straggler", "--method", "cross_rank", "-o", str(out))
    assert result.code == 0, result.err
    assert "cross_rank" in result.out
    names = {e["args"]["name"] for e in read_trace(out)["traceEvents"] if e["name"] == "process_name"}
    assert "Critical path (cross_rank)" in names
