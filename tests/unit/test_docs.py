"""Every dot command and every bundled report is documented: --help, docs/shell.md, README."""

from __future__ import annotations

import io
import runpy
from pathlib import Path

import pytest

from ctda_sql.engine.reports import bundled_reports
from ctda_sql.shell.commands import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
SHELL_DOC = (ROOT / "docs" / "shell.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def shell_help():
    import contextlib
    import io

    from ctda_sql.shell.entry import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), pytest.raises(SystemExit):
        main(["shell", "--help"])
    return buffer.getvalue()


def _doc_row(command) -> str:
    return f"| `{command.name}` | " + (f"`{command.args.replace('|', chr(92) + '|')}`" if command.args else "")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_dot_command_is_in_the_shell_doc_with_its_arguments(name):
    command = REGISTRY[name]
    assert _doc_row(command) in SHELL_DOC, f"docs/shell.md has no row starting {_doc_row(command)!r}"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_dot_command_is_in_the_readme_or_the_shell_doc_it_links(name):
    # `.timer` alone, or with its arguments: `.timer on|off`
    in_readme = f"`{name}`" in README or f"`{name} " in README
    assert in_readme or ("docs/shell.md" in README and _doc_row(REGISTRY[name]) in SHELL_DOC)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_dot_command_is_in_shell_help(shell_help, name):
    assert f"{name} {REGISTRY[name].args}".strip() in shell_help


@pytest.mark.parametrize("name", sorted(bundled_reports()))
def test_report_is_in_the_shell_doc(name):
    report = bundled_reports()[name]
    row = f"| `{name}` | {report.description.replace('|', chr(92) + '|')} |"
    assert row in SHELL_DOC, f"docs/shell.md has no row {row!r}"
    for param in report.params:
        assert f"`{param.name}`" in SHELL_DOC.split(row, 1)[1].splitlines()[0]


@pytest.mark.parametrize("name", sorted(bundled_reports()))
def test_report_is_listed_by_the_cli(run_cli, name):
    assert name in run_cli("report", "--list", "--format", "csv").out


def test_the_readme_points_at_the_shell_doc():
    assert "docs/shell.md" in README


def test_every_documented_dot_command_exists():
    import re

    documented = set(re.findall(r"^\| `(\.[a-z]+)` \|", SHELL_DOC, flags=re.M))
    assert documented == set(REGISTRY)


def test_the_shell_doc_table_is_generated_from_the_registry():
    with_generated_table = runpy.run_path(str(ROOT / "scripts" / "shell_docs.py"))["with_generated_table"]

    assert with_generated_table(SHELL_DOC) == SHELL_DOC, "run `python scripts/shell_docs.py` and commit docs/shell.md"


@pytest.mark.parametrize("subcommand, dot", [("ingest", ".ingest"), ("analyze", ".analyze")])
def test_cli_subcommands_and_dot_commands_share_their_options(subcommand, dot):
    from ctda_sql.cli.main import build_parser

    parser = build_parser()._subparsers._group_actions[0].choices[subcommand]
    cli_flags = {flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")}
    dot_flags = {word.strip("[]").rstrip(".") for word in REGISTRY[dot].args.split() if word.startswith("[--")}
    # --lake and its Dask options are CLI-only: a shell session works on one database file;
    # --quiet and --verbose say how much a command prints on its own
    assert dot_flags == cli_flags - {"--help", "--quiet", "--verbose", "--db", "--lake", "--workers", "--scheduler"}


def _python_sessions(text: str) -> list[str]:
    """The ```python blocks of a doc that are interactive sessions (lines start with >>>)."""
    import re

    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)
    return [block for block in blocks if block.lstrip().startswith(">>>")]


@pytest.mark.parametrize("doc", ["docs/python.md"])
def test_the_docs_python_sessions_run_as_written(doc, tmp_path, monkeypatch):
    # the session had gone stale (2,817 nodes, two methods) and its .df() failed in the venv
    # the README installs (no pandas): now it runs, in a folder holding the demo trace
    import doctest
    import shutil
    from importlib import resources

    sessions = _python_sessions((ROOT / doc).read_text(encoding="utf-8"))
    assert sessions, f"{doc} has no >>> session"
    shutil.copy(resources.files("ctda_sql") / "data/nccl.json.gz", tmp_path / "nccl.json.gz")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTDA_DB", raising=False)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    for number, session in enumerate(sessions):
        test = doctest.DocTestParser().get_doctest(session, {}, f"{doc}[{number}]", doc, 0)
        runner = doctest.DocTestRunner(optionflags=flags)
        report = io.StringIO()
        runner.run(test, out=report.write)
        assert runner.failures == 0, report.getvalue()


def test_the_readme_says_where_the_real_trace_tier_comes_from():
    assert "CTDA_TRACES" in README and "HolisticTraceAnalysis" in README and "tests/data" in README
