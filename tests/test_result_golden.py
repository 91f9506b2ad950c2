"""Every result table of every shared and recorded trace is what it was (issue 32: a change
for speed changes no row). The digests are kept in tests/data/result_digests.json; a change
that is meant to change results rewrites them with

    CTDA_UPDATE_DIGESTS=1 CTDA_TRACES=../shared/traces python -m pytest tests/test_result_golden.py

and its commit shows, run by run and table by table, which results it changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from result_digests import digests, load_and_replay, recorded_inputs, shared_inputs
from ctda_sql.core.connection import connect

KEPT = Path(__file__).parent / "data" / "result_digests.json"
UPDATE = os.environ.get("CTDA_UPDATE_DIGESTS") == "1"


@pytest.fixture(scope="module")
def every_input(shared_traces):
    return shared_inputs(shared_traces) | recorded_inputs()


@pytest.fixture(scope="module")
def result_digests(every_input, tmp_path_factory):
    con = connect(tmp_path_factory.mktemp("golden") / "golden.duckdb")
    load_and_replay(con, every_input)
    found = digests(con)
    con.close()
    return found


def test_every_result_table_keeps_its_digest(result_digests):
    if UPDATE:
        KEPT.write_text(json.dumps(result_digests, indent=1, sort_keys=True) + "\n")
    kept = json.loads(KEPT.read_text())
    changed = [f"{run}/{table}: kept {kept[run].get(table)}, now {digest}"
               for run, tables in sorted(result_digests.items()) if run in kept
               for table, digest in sorted(tables.items()) if kept[run].get(table) != digest]
    new = sorted(result_digests.keys() - kept.keys())
    gone = sorted(kept.keys() - result_digests.keys())
    assert not (changed or new or gone), (
        "results differ from tests/data/result_digests.json (rows:md5); if the change is meant, "
        "rerun this test with CTDA_UPDATE_DIGESTS=1 and commit the file:\n"
        + "\n".join(changed + [f"{run}: no kept digest" for run in new] + [f"{run}: no longer an input" for run in gone]))


# none since issue 42: cpu_only's one step holds only gloo executions on worker threads, which
# are nodes now (the what-if graph leaves them out: tests/test_whatif_cli.py replays it as measured)
NO_NODES: set[str] = set()


def test_every_input_has_paths_and_a_replay(result_digests):
    """The digests cover real results: every input has critical-path and what-if rows."""
    empty = [(run, table) for run, tables in result_digests.items() if run not in NO_NODES
             for table in ("critical_path", "path_events", "nodes", "whatif_steps")
             if tables[table].startswith("0:")]
    assert empty == []
    assert all(result_digests[run]["nodes"].startswith("0:") for run in NO_NODES)


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


def test_a_changed_row_changes_the_digest(shared_traces, tmp_path):
    con = connect(tmp_path / "one.duckdb")
    load_and_replay(con, {"simple": shared_traces / "simple_add.json.gz"})
    before = digests(con)["simple"]
    con.execute("UPDATE critical_path SET counted_us = counted_us + 1 WHERE rowid = "
                "(SELECT min(rowid) FROM critical_path)")
    after = digests(con)["simple"]
    assert {table for table in before if before[table] != after[table]} == {"critical_path"}
