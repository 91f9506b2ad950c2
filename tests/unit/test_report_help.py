"""Reports explain themselves in the shell: `.help report NAME`, `.reports` and completion
show each parameter's type, default and help from the report's .sql header."""

from __future__ import annotations

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from ctda_sql.core.connection import connect
from ctda_sql.shell.app import open_state, run_and_show
from ctda_sql.shell.catalog import Catalog
from ctda_sql.shell.completion import WarehouseCompleter


@pytest.fixture
def state(tmp_path):
    connect(tmp_path / "h.duckdb").close()
    shell = open_state(str(tmp_path / "h.duckdb"))
    yield shell
    shell.set_output(None)
    shell.con.close()


def run(state, text: str, capsys) -> tuple[bool, str, str]:
    worked = run_and_show(state, text)
    captured = capsys.readouterr()
    return worked, captured.out, captured.err


def test_help_report_lists_each_parameter_with_type_default_and_help(state, capsys):
    run(state, ".mode csv", capsys)
    worked, out, err = run(state, ".help report hotspots", capsys)
    assert worked, err
    assert "parameter,type,default,help" in out
    assert "top,INTEGER,20,rows to keep" in out and "method,VARCHAR,ctda,ctda or per_thread" in out
    assert "run,VARCHAR,NULL,run name; all runs when NULL" in out


def test_help_report_of_an_unknown_report_names_the_reports(state, capsys):
    worked, _, err = run(state, ".help report nope", capsys)
    assert not worked and "no report named 'nope'" in err and "hotspots" in err


def test_reports_lists_parameters_with_their_defaults_and_help(state, capsys):
    run(state, ".mode csv", capsys)
    _, out, _ = run(state, ".reports", capsys)
    assert "top INTEGER = 20: rows to keep" in out


def test_completion_shows_what_a_parameter_is(state):
    completer = WarehouseCompleter(Catalog(state.con, state.holding))

    def menu(text: str) -> dict[str, str]:
        found = completer.get_completions(Document(text), CompleteEvent(completion_requested=True))
        return {c.text: c.display_meta_text for c in found}

    assert menu(".report hotspots t") == {"top=": "INTEGER = 20: rows to keep"}
    assert "counted (self) time" in menu(".report hots")["hotspots"]
    assert "hotspots" in menu(".help report ")
    assert "report" in menu(".help rep")


def test_a_report_in_the_shell_keeps_its_key_columns_at_80_columns(state, capsys):
    # `.report collective_skew` hid last_rank and skew_us at 80 columns, as the command line did
    run(state, ".maxwidth 80", capsys)
    worked, out, err = run(state, ".report collective_skew", capsys)
    header = [cell.strip() for cell in out.splitlines()[1].split("│")[1:-1]]
    assert worked and {"last_rank", "skew_us"} <= set(header), out + err
    assert max(len(line) for line in out.splitlines()) <= 80
