"""Shared fixtures: a CLI runner, temporary databases, the trace builder and the shared traces."""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctda_sql.core.connection import connect
from ctda_sql.shell.entry import main as cli_main
from ctda_sql.testing.tracebuilder import TraceBuilder

from helpers.db import analysed_db
from helpers.jobs import p2p_job

DATA = Path(__file__).parent / "data"


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture
def run_cli(capsys, db_path, monkeypatch):
    """Run `ctda-sql ARGS...` in-process against the test database; returns CliResult."""

    def run(*args: str, stdin: str | None = None, db: Path | None = None) -> CliResult:
        if stdin is not None:
            import io

            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = cli_main(["--db", str(db or db_path), *args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def terminal_env(tmp_path, monkeypatch):
    """Environment for driving the shell under pexpect: private history, no pager prompts."""
    monkeypatch.setenv("CTDA_HISTORY", str(tmp_path / "history"))
    monkeypatch.setenv("PAGER", "cat")
    monkeypatch.setenv("TERM", "xterm")
    # pexpect does not answer cursor position requests; tell prompt_toolkit not to ask
    monkeypatch.setenv("PROMPT_TOOLKIT_NO_CPR", "1")


@pytest.fixture
def builder() -> TraceBuilder:
    return TraceBuilder(rank=0)


@pytest.fixture
def open_db(db_path):
    """Open the test database (after the CLI wrote it)."""
    connections = []

    def _open(read_only: bool = True):
        con = connect(db_path, read_only=read_only)
        connections.append(con)
        return con

    yield _open
    for con in connections:
        con.close()


def _shared_traces_dir() -> Path | None:
    value = os.environ.get("CTDA_TRACES")
    if not value:
        return None
    path = Path(value)
    if not path.is_dir():
        raise pytest.UsageError(f"CTDA_TRACES={value} is set but is not a folder")
    return path


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The real traces folder from $CTDA_TRACES; skips when unset, fails when missing."""
    path = _shared_traces_dir()
    if path is None:
        pytest.skip("CTDA_TRACES is not set (real-trace tier)")
    return path


@pytest.fixture(scope="module")
def p2p_db(tmp_path_factory):
    """The hand-made send/recv pair of tests/engine/test_crossrank_parallel.py, analysed: run `buffered`
    (the send returns before its receiver arrives) and `rendezvous` (it waits for it)."""
    root = tmp_path_factory.mktemp("p2p")
    con = analysed_db(root / "p2p.duckdb", {name: [p2p_job(root / name, name == "buffered")]
                                            for name in ("buffered", "rendezvous")})
    yield con
    con.close()


def pytest_configure(config):
    # fail the whole run early and loudly when the variable points nowhere
    _shared_traces_dir()


# ---- the tiers (markers registered in pyproject.toml; README.md gives the commands) ----------
#   fast:  python -m pytest -m "not slow and not shared and not ci_only"
#   all:   CTDA_TRACES=../shared/traces python -m pytest  (what CI runs)

# tests that need what .ci/run installs or builds (Chromium, SimGrid, a wheel): with CI set a
# missing tool fails them, elsewhere it skips them
CI_ONLY_FIXTURES = {"wheel", "simgrid"}
CI_ONLY_CALLS = ("chromium_or_skip(", "needs_simgrid(")

# measured: what takes the fast tier past 3 minutes on 2 cores. The default tier (no
# $CTDA_TRACES) took 1042 CPU seconds (per test, with its subprocesses; README.md's Tests);
# these modules and tests are most of them, taken the most expensive first until about 160
# were left (measured again on the fast tier itself). A renamed test drops out of the list:
# measure again when the fast tier grows past 3 minutes.
# A module by file name (its module fixtures are most of its time), a test by module::name
# (every parameter of it).
SLOW_MODULES = {
    "test_advice.py", "test_demo.py", "test_engine_cuda.py", "test_engine_properties.py", "test_interrupts.py",
    "test_lake.py", "test_legacy_traces.py", "test_reliability.py", "test_result_digest.py", "test_result_golden.py",
    "test_path_replay_agreement.py", "test_timestamp_properties.py", "test_whatif.py", "test_whatif_ordered.py",
    "test_whatif_pairs.py", "test_whatif_properties.py", "test_sql_contracts.py", "test_gloo_path.py",
    # measured again on an idle machine after the tests moved into folders (3:14 -> under 3:00)
    "test_shell_terminal.py", "test_path_diff.py", "test_export_html.py", "test_engine_cuda_parallel.py",
    # measured again 2026-11-29 (the fast tier had grown to 914 tests, 3:29 on an idle machine)
    "test_carried_kernel_scaled.py", "test_handoff_counted_once.py", "test_whatif_multirank.py",
    "test_engine_fidelity.py", "test_export_overlay.py",
}
SLOW_TESTS = {
    "test_analyze_cli.py::test_no_split_starved_switch_reproduces_the_papers_gpu_nodes",
    "test_analyze_cli.py::test_rerunning_replaces_earlier_results",
    "test_api.py::test_bad_arguments_are_one_ctda_error_naming_them",
    "test_bad_input.py::test_bad_file_is_refused_and_db_unchanged",
    "test_bad_input.py::test_console_script_prints_no_traceback_for_bad_file",
    "test_cli_output.py::test_a_report_without_a_run_column_says_when_it_adds_up_several_runs",
    "test_cli_output.py::test_every_format_prints_every_digit",
    "test_cli_output.py::test_report_and_the_shell_accept_duckdbs_other_modes",
    "test_cli_output.py::test_text_formats_print_no_float_noise",
    "test_cluster_reliability.py::test_a_whatif_runs_with_an_example_cluster_file",
    "test_crossrank.py::test_a_larger_job_follows_every_steps_late_rank",
    "test_crossrank_long_paths.py::test_a_path_of_more_than_ten_thousand_hops_reaches_the_step_start",
    "test_crossrank_pairing.py::test_a_rank_whose_trace_starts_a_step_later_pairs_only_within_steps",
    "test_crossrank_pairing.py::test_a_whole_trace_pairs_every_send_with_the_recv_of_its_message",
    "test_crossrank_pairing.py::test_tied_step_ends_give_the_same_path_every_time",
    "test_docs.py::test_report_is_listed_by_the_cli",
    "test_docs.py::test_the_docs_python_sessions_run_as_written",
    "test_engine_cuda_parallel.py::test_every_profiled_step_of_every_rank_gets_a_path",
    "test_engine_cuda_parallel.py::test_every_run_keeps_every_path_invariant",
    "test_engine_cuda_parallel.py::test_top_hotspots_are_stable_as_the_hand_off_tolerance_goes_from_15_to_100us",
    "test_export_html.py::test_bad_requests_get_one_error_line",
    "test_export_html.py::test_report_is_self_contained",
    "test_export_html.py::test_whatif_section_appears_only_when_the_run_has_scenarios",
    "test_export_overlay.py::test_an_export_never_writes_over_the_warehouse",
    "test_export_overlay.py::test_an_output_that_cannot_be_written_gets_one_error_line",
    "test_export_overlay.py::test_bad_requests_get_one_error_line",
    "test_export_overlay.py::test_ranks_that_share_a_device_index_get_tracks_of_their_own",
    "test_gloo_path.py::test_a_network_change_moves_the_gloo_transfer_and_the_step",
    "test_gloo_path.py::test_every_step_of_every_shaped_recording_is_covered",
    "test_ingest.py::test_a_batch_holds_one_files_events_in_memory_at_a_time",
    "test_ingest.py::test_a_parallel_insert_keeps_file_order_in_whole_row_groups",
    "test_lake_reliability.py::test_a_scheduler_that_is_none_is_one_error_line_at_once",
    "test_lake_reliability.py::test_ctrl_c_before_anything_is_written_leaves_no_lake_and_says_so",
    "test_lake_reliability.py::test_ctrl_c_during_the_writes_names_the_ranks_kept_and_a_rerun_loads_the_rest",
    "test_locking.py::test_an_idle_shell_lets_other_processes_ingest_and_keeps_its_temp_tables",
    "test_macros_lazy.py::test_every_report_binds_with_only_its_macros",
    "test_output_snapshots.py::test_every_report_declares_key_columns_and_shows_them_at_80_columns",
    "test_output_snapshots.py::test_report_table",
    "test_path_diff.py::test_recorded_annotation_rows_are_the_path_time_inside_each_annotation",
    "test_path_diff.py::test_recorded_data_loading_removed_lands_on_data_loading",
    "test_path_diff.py::test_the_report_on_the_command_line_refuses_in_one_line",
    "test_recorded_data.py::test_each_recorded_trace_names_itself_not_a_temporary_path",
    "test_shell.py::test_a_pager_that_cannot_run_still_shows_the_result_after_one_warning",
    "test_shell.py::test_dot_command_errors_are_one_line",
    "test_shell.py::test_export_writes_a_result_in_the_format_its_name_says",
    "test_shell.py::test_headers_nullvalue_and_separator_shape_csv",
    "test_shell.py::test_listing_commands",
    "test_shell.py::test_the_new_dot_commands_refuse_bad_arguments_in_one_line",
    "test_shell_batch.py::test_duckdb_cli_flags_on_the_bare_entry",
    "test_shell_batch.py::test_piped_statements_run_as_a_batch_in_csv",
    "test_shell_batch.py::test_the_batch_examples_of_the_shell_doc_run",
    "test_shell_safe.py::test_a_command_not_declared_reaches_no_file_given_a_path",
    "test_shell_safe.py::test_a_safe_session_refuses_each_command_that_names_a_path",
    "test_shell_safe.py::test_every_form_of_whatif_cluster_is_refused",
    "test_shell_terminal.py::test_query_and_quit_in_a_real_terminal",
    "test_sql_files.py::test_bundled_report_runs",
    "test_storage_format.py::test_ingest_writes_a_file_older_duckdb_versions_open",
    "test_storage_format.py::test_other_commands_creating_the_file_use_the_same_format",
    "test_whatif_cli.py::test_bad_values_are_one_error_line_and_store_nothing",
    "test_whatif_multirank.py::test_cli_rank_scoped_change_is_stored",
    "test_whatif_multirank.py::test_removing_the_late_ranks_work_predicts_every_rank",
    "test_whatif_multirank.py::test_unchanged_coupled_replay_reproduces_every_rank",
    "test_whatif_parallel.py::test_removing_the_recorded_slow_stage_predicts_the_runs_without_it",
    "test_whatif_parallel.py::test_removing_the_slow_stage_predicts_the_pipeline_without_it",
    "test_whatif_parallel.py::test_without_coupling_the_upstream_stage_keeps_its_waiting",
}


def _calls_a_ci_tool(item) -> bool:
    try:
        source = inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return False
    return any(call in source for call in CI_ONLY_CALLS)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "shared_traces" in item.fixturenames:
            item.add_marker(pytest.mark.shared)
        if CI_ONLY_FIXTURES & set(item.fixturenames) or _calls_a_ci_tool(item):
            item.add_marker(pytest.mark.ci_only)
        name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        if item.path.name in SLOW_MODULES or name in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
