"""Issue 43 High 1: `shell --safe` reaches no file through a dot command. Every command that
names a file or folder says so in the command registry (`names_path`), and a --safe session
(writable, read-only or on a lake) refuses it with one line before it runs. These tests walk
the registry, so a command added later is checked too."""

from __future__ import annotations

import re
import subprocess

import pytest

from ctda_sql.shell.app import open_lake_state, open_state, run_and_show
from ctda_sql.shell.commands import PATHS, REGISTRY, path_named

from shell_helpers import ctda_command, write_trace

SECRET = "TOPSECRET-line"

# a line that names a path, for each command that takes one: {new} is a file that must not
# appear, {secret} one whose text must not be shown, {trace} a trace that must not load
NAMING_A_PATH = {
    ".ingest": "{trace} --run leaked",
    ".output": "{new}",
    ".once": "{new}",
    ".read": "{secret}",
    ".export": "{new} SELECT 1 AS a",
    ".open": "{new}",
    ".whatif": "--cluster {secret}",
}
# the forms argparse takes for an option that names a file
WHATIF_CLUSTER_FORMS = ["--cluster {secret}", "--cluster={secret}", "--clus {secret}", "--run x --cl={secret}"]


@pytest.fixture(autouse=True)
def private_history(tmp_path, monkeypatch):
    monkeypatch.setenv("CTDA_HISTORY", str(tmp_path / "history"))


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lake")
    trace = write_trace(folder, "train")
    done = subprocess.run([*ctda_command(), "ingest", "-q", "--lake", str(folder / "lake"), str(trace),
                           "--workers", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return folder / "lake"


@pytest.fixture
def files(tmp_path):
    secret = tmp_path / "secret.toml"
    secret.write_text(f"[cluster]\nhosts = '{SECRET}'\n")
    other = tmp_path / "other"
    other.mkdir()
    return {"new": tmp_path / "made-by-the-shell.csv", "secret": secret, "trace": write_trace(other, "second")}


@pytest.fixture(params=["writable", "read_only", "lake"])
def safe_state(request, tmp_path, run_cli, db_path):
    if request.param == "lake":
        state = open_lake_state(str(request.getfixturevalue("lake")), safe=True)
    else:
        assert run_cli("ingest", "-q", str(write_trace(tmp_path)), "--run", "train").code == 0
        state = open_state(str(db_path), read_only=request.param == "read_only", safe=True)
    yield state
    state.set_output(None)
    state.con.close()


def _run(state, line: str, capsys) -> tuple[bool, str, str]:
    worked = run_and_show(state, line)
    captured = capsys.readouterr()
    return worked, captured.out, captured.err


def _run_names(state) -> list[str]:
    with state.holding():
        return sorted(row[0] for row in state.con.execute("SELECT name FROM runs").fetchall())


def test_the_registry_declares_every_command_that_names_a_path():
    """The list here is complete: each command whose arguments or completion speak of a
    file, path or folder declares it, and each that declares it has a line above."""
    declared = {name for name, command in REGISTRY.items() if command.names_path}
    assert declared == set(NAMING_A_PATH)
    for name, command in REGISTRY.items():
        if command.complete == PATHS or re.search(r"\b(FILE|PATH|DIR|FOLDER)", command.args):
            assert command.names_path, f"{name} {command.args} names a path but does not say so"


@pytest.mark.parametrize("name", sorted(NAMING_A_PATH))
def test_a_safe_session_refuses_each_command_that_names_a_path(safe_state, files, capsys, name):
    runs_before = _run_names(safe_state)
    line = f"{name} " + NAMING_A_PATH[name].format(**files)
    worked, out, err = _run(safe_state, line, capsys)
    named = path_named(REGISTRY[name], line.split()[1:])
    assert not worked and out == ""
    assert err == (f"error: {named} is off in a --safe session: it names a file, "
                   "and a --safe session reaches no file but the warehouse\n")
    assert not files["new"].exists() and SECRET not in err
    assert safe_state.output_file is None  # nothing redirected
    assert _run_names(safe_state) == runs_before
    assert run_and_show(safe_state, "SELECT 1;")  # the session goes on


@pytest.mark.parametrize("form", WHATIF_CLUSTER_FORMS)
def test_every_form_of_whatif_cluster_is_refused(safe_state, files, capsys, form):
    worked, _, err = _run(safe_state, ".whatif " + form.format(**files), capsys)
    assert not worked and err.startswith("error: .whatif --cluster is off in a --safe session")
    assert SECRET not in err


@pytest.mark.parametrize("name", sorted(set(REGISTRY) - set(NAMING_A_PATH) - {".quit"}))
def test_a_command_not_declared_reaches_no_file_given_a_path(safe_state, files, capsys, name):
    """The other half of completeness: a command that does not declare a path, given paths
    as its words, creates no file and shows none."""
    for words in ("{new}", "{secret}", "{new} {secret}", "--cluster {secret}"):
        _, out, err = _run(safe_state, f"{name} " + words.format(**files), capsys)
        assert not files["new"].exists() and SECRET not in out + err, (name, words)


def test_path_commands_still_work_without_safe(tmp_path, run_cli, db_path, capsys):
    assert run_cli("ingest", "-q", str(write_trace(tmp_path)), "--run", "train").code == 0
    state = open_state(str(db_path))
    try:
        target = tmp_path / "out.csv"
        assert run_and_show(state, f".output {target}")
        assert run_and_show(state, ".mode csv")
        assert run_and_show(state, "SELECT 7 AS seven;")
        state.set_output(None)
        assert target.read_text() == "seven\n7\n"
    finally:
        state.con.close()


def test_a_safe_shell_from_the_command_line_refuses_output(tmp_path, run_cli, db_path):
    assert run_cli("ingest", "-q", str(write_trace(tmp_path)), "--run", "train").code == 0
    target = tmp_path / "leak.csv"
    done = subprocess.run([*ctda_command(), "--db", str(db_path), "shell", "--safe"],
                          input=f".output {target}\nSELECT 1 AS a;\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and not target.exists()
    assert done.stderr.startswith("error: .output is off in a --safe session") and len(done.stderr.splitlines()) == 1
