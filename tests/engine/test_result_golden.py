"""Every result table of every shared and recorded trace is what it was (issue 32: a change
for speed changes no row). The digests are kept in tests/data/result_digests.json; a change
that is meant to change results rewrites them with

    CTDA_UPDATE_DIGESTS=1 CTDA_TRACES=../shared/traces python -m pytest tests/engine/test_result_golden.py

and its commit shows, run by run and table by table, which results it changed. The recordings
kept in tests/data are checked (and rewritten) without $CTDA_TRACES too; the shared traces only
with it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ctda_sql.core.connection import connect

from result_digests import digests, load_and_replay, recorded_inputs, shared_inputs

KEPT = Path(__file__).parents[1] / "data" / "result_digests.json"
UPDATE = os.environ.get("CTDA_UPDATE_DIGESTS") == "1"


def analysed_digests(inputs: dict[str, Path], folder: Path) -> dict[str, dict[str, str]]:
    con = connect(folder / "golden.duckdb")
    load_and_replay(con, inputs)
    found = digests(con)
    con.close()
    return found


# a run's digest does not depend on the runs beside it (test_analysing_again_gives_the_same_digests):
# the recordings kept in tests/data are checked without $CTDA_TRACES, the shared traces with it
@pytest.fixture(scope="module")
def recorded_digests(tmp_path_factory):
    return analysed_digests(recorded_inputs(), tmp_path_factory.mktemp("recorded"))


@pytest.fixture(scope="module")
def shared_digests(shared_traces, tmp_path_factory):
    return analysed_digests(shared_inputs(shared_traces), tmp_path_factory.mktemp("shared"))


def is_shared(run: str) -> bool:
    return run.startswith("shared/")


def assert_digests_kept(found: dict[str, dict[str, str]], shared: bool) -> None:
    """`found` equals the kept digests of the shared (or the recorded) runs, table by table;
    CTDA_UPDATE_DIGESTS=1 rewrites those and keeps the others."""
    kept_all = json.loads(KEPT.read_text())
    if UPDATE:
        kept_all = {run: tables for run, tables in kept_all.items() if is_shared(run) != shared} | found
        KEPT.write_text(json.dumps(kept_all, indent=1, sort_keys=True) + "\n")
    kept = {run: tables for run, tables in kept_all.items() if is_shared(run) == shared}
    changed = [f"{run}/{table}: kept {kept[run].get(table)}, now {digest}"
               for run, tables in sorted(found.items()) if run in kept
               for table, digest in sorted(tables.items()) if kept[run].get(table) != digest]
    new = sorted(found.keys() - kept.keys())
    gone = sorted(kept.keys() - found.keys())
    assert not (changed or new or gone), (
        "results differ from tests/data/result_digests.json (rows:md5); if the change is meant, "
        "rerun this test with CTDA_UPDATE_DIGESTS=1 and commit the file:\n"
        + "\n".join(changed + [f"{run}: no kept digest" for run in new] + [f"{run}: no longer an input" for run in gone]))


def test_every_result_table_of_the_recordings_keeps_its_digest(recorded_digests):
    assert_digests_kept(recorded_digests, shared=False)


def test_every_result_table_of_the_shared_traces_keeps_its_digest(shared_digests):
    assert_digests_kept(shared_digests, shared=True)


# none since issue 42: cpu_only's one step holds only gloo executions on worker threads, which
# are nodes now (the what-if graph leaves them out: tests/whatif/test_whatif_cli.py replays it as measured)
NO_NODES: set[str] = set()


def empty_results(found: dict[str, dict[str, str]]) -> list[tuple[str, str]]:
    """(run, table) of the inputs without critical-path or what-if rows, NO_NODES aside."""
    return [(run, table) for run, tables in found.items() if run not in NO_NODES
            for table in ("critical_path", "path_events", "nodes", "whatif_steps")
            if tables[table].startswith("0:")]


def test_every_recording_has_paths_and_a_replay(recorded_digests):
    """The digests cover real results: every input has critical-path and what-if rows."""
    assert empty_results(recorded_digests) == []
    assert all(recorded_digests[run]["nodes"].startswith("0:") for run in NO_NODES if run in recorded_digests)


def test_every_shared_trace_has_paths_and_a_replay(shared_digests):
    assert empty_results(shared_digests) == []
    assert all(shared_digests[run]["nodes"].startswith("0:") for run in NO_NODES if run in shared_digests)


def test_analysing_again_gives_the_same_digests(shared_traces, tmp_path):
    """Results are a function of the trace: the same multi-rank inputs analysed in another
    warehouse, in another order, digest the same (no dependence on threads or row order)."""
    inputs = shared_inputs(shared_traces)
    chosen = {name: inputs[name] for name in ("shared/two_ranks", "shared/nccl")}
    chosen |= {name: path for name, path in recorded_inputs().items() if name == "gloo/pipeline"}
    con = connect(tmp_path / "again.duckdb")
    load_and_replay(con, dict(reversed(chosen.items())))
    again = digests(con)
    kept = json.loads(KEPT.read_text())
    assert {run: again[run] for run in chosen} == {run: kept[run] for run in chosen}


def test_a_changed_row_changes_the_digest(tmp_path):
    con = connect(tmp_path / "one.duckdb")
    load_and_replay(con, {"graph": recorded_inputs()["cuda/cuda_graph"]})
    before = digests(con)["graph"]
    con.execute("UPDATE critical_path SET counted_us = counted_us + 1 WHERE rowid = "
                "(SELECT min(rowid) FROM critical_path)")
    after = digests(con)["graph"]
    assert {table for table in before if before[table] != after[table]} == {"critical_path"}
