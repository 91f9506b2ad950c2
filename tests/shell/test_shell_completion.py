"""Completion candidates: SQL words, tables, columns, functions, dot commands, reports, values."""

from __future__ import annotations

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from ctda_sql.shell.app import open_state
from ctda_sql.shell.catalog import Catalog
from ctda_sql.shell.completion import WarehouseCompleter
from ctda_sql.testing.tracebuilder import TraceBuilder


@pytest.fixture(scope="module")
def completer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("completion")
    builder = TraceBuilder(rank=0)
    main = builder.thread(100, "pt_main_thread")
    builder.step(1, main, ts=0, dur=500)
    for index in range(3):
        builder.cpu_op(main, "aten::relu", ts=10 + index * 10, dur=5)
    builder.cpu_op(main, "aten::reshape", ts=100, dur=5)
    builder.cpu_op(main, "Optimizer.step", ts=200, dur=5)
    from ctda_sql.ingest.load import ingest

    state = open_state(str(folder / "c.duckdb"))
    with state.holding(write=True):
        ingest(state.con, [builder.write(folder / "t.json")], run_name="nightly_run", show_progress=False)
    yield WarehouseCompleter(Catalog(state.con, state.holding))
    state.con.close()


def candidates(completer, text: str) -> list[str]:
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]


def test_dot_command_names(completer):
    assert candidates(completer, ".re") == [".read", ".report", ".reports"]


def test_report_names_then_their_parameters(completer):
    assert "runs" in candidates(completer, ".report ")
    assert candidates(completer, ".report hotspots_by_experiment ") == ["by=", "method=", "top="]
    assert candidates(completer, ".report hotspots_by_experiment by=x ") == ["method=", "top="]


@pytest.mark.parametrize("text, expected", [
    (".mode c", ["csv"]), (".timer o", ["on", "off"]), (".dialect post", ["postgres"]),
    (".schema ev", ["events"]), (".help .ti", [".timer"]), (".analyze --method ", ["all", "ctda", "per_thread", "cross_rank"]),
    (".analyze --run ", ["nightly_run"]),
])
def test_dot_command_arguments(completer, text, expected):
    assert candidates(completer, text) == expected


def test_paths_after_read(completer, tmp_path):
    (tmp_path / "script.sql").write_text("SELECT 1;")
    assert candidates(completer, f".read {tmp_path}/scr") == ["ipt.sql"]


def test_tables_after_from_and_join(completer):
    assert candidates(completer, "SELECT * FROM st") == ["steps"]
    assert "threads" in candidates(completer, "SELECT * FROM events e JOIN thr")


def test_columns_after_a_table_or_alias_and_dot(completer):
    assert candidates(completer, "SELECT * FROM events e WHERE e.dur") == ["dur_us"]
    assert "ingested_at" in candidates(completer, "SELECT runs.")


def test_columns_of_mentioned_tables_functions_and_keywords(completer):
    words = candidates(completer, "SELECT * FROM steps WHERE start")
    assert words[0] == "start_us"
    assert "starts_with" in words
    assert "SELECT" in candidates(completer, "SEL") and "select" in candidates(completer, "sel")


def test_project_macros_and_udfs_are_offered(completer):
    assert "fmt_us" in candidates(completer, "SELECT fmt_")
    assert "is_gpu_work" in candidates(completer, "SELECT is_gpu")


def test_event_names_inside_quotes_most_frequent_first(completer):
    assert candidates(completer, "SELECT * FROM events WHERE name = 'aten::re") == ["aten::relu", "aten::reshape"]
    assert candidates(completer, "SELECT * FROM events WHERE name LIKE 'Opt") == ["Optimizer.step"]


def test_event_names_are_case_insensitive_and_cached(completer):
    assert candidates(completer, "SELECT * FROM events WHERE name IN ('aten::relu', 'opt") == ["Optimizer.step"]
    assert "opt" in completer.catalog._event_names


def test_run_names_inside_quotes(completer):
    assert candidates(completer, "SELECT * FROM runs WHERE name = 'nig") == ["nightly_run"]
    assert candidates(completer, "SELECT * FROM run_meta WHERE run = '") == ["nightly_run"]


def test_nothing_typed_offers_nothing(completer):
    assert candidates(completer, "SELECT ") == []


def test_event_name_completion_offers_the_first_50_of_a_million_events(tmp_path):
    # how fast it is on big warehouses is measured by hand in bench/, not asserted here
    state = open_state(str(tmp_path / "big.duckdb"))
    with state.holding(write=True):
        state.con.execute(
            "INSERT INTO events (run_id, rank, event_id, name) "
            "SELECT 1, 0, i, 'op_' || (i % 5000) FROM range(1000000) AS r(i)"
        )
    completer = WarehouseCompleter(Catalog(state.con, state.holding))
    found = candidates(completer, "SELECT * FROM events WHERE name = 'op_1")
    assert len(found) == 50 and all(name.startswith("op_1") for name in found)
    state.con.close()


def test_column_completion_shows_each_columns_description(completer):
    found = completer.get_completions(Document("SELECT * FROM events e WHERE e.dur"), CompleteEvent(completion_requested=True))
    meta = {c.text: c.display_meta_text for c in found}
    assert meta == {"dur_us": "duration in microseconds (NULL for events without one)"}


@pytest.mark.parametrize("text, expected", [
    (".report runs run=", ["nightly_run"]), (".report hotspots run=nig", ["nightly_run"]),
    (".report run_diff run_b=", ["nightly_run"]), (".report run_diff run_a='nig", ["nightly_run"]),
    (".report hotspots top=", []), (".report hotspots nosuch=", []), (".report nosuch run=", []),
])
def test_report_run_parameters_complete_to_run_names(completer, text, expected):
    """Issue 43 (first use 6): `.report X run=<Tab>` offered nothing."""
    assert candidates(completer, text) == expected


def test_a_run_name_the_shell_would_split_is_quoted(tmp_path):
    from ctda_sql.ingest.load import ingest

    from shell_helpers import write_trace

    state = open_state(str(tmp_path / "q.duckdb"))
    with state.holding(write=True):
        ingest(state.con, [write_trace(tmp_path)], run_name="my run", show_progress=False)
    completer = WarehouseCompleter(Catalog(state.con, state.holding))
    try:
        found = list(completer.get_completions(Document(".report runs run=my"), CompleteEvent(completion_requested=True)))
        assert [(c.text, c.start_position) for c in found] == [("'my run'", -2)]
    finally:
        state.con.close()
