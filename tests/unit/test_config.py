"""The settings file (~/.config/ctda-sql/config.toml, or $CTDA_CONFIG): defaults for the
database, output format, table size and shell behaviour, below command-line options."""

from __future__ import annotations

import pytest

from ctda_sql.core.connection import connect
from ctda_sql.shell.app import open_state
from ctda_sql.shell.entry import main


@pytest.fixture
def settings(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    monkeypatch.setenv("CTDA_CONFIG", str(path))
    monkeypatch.delenv("CTDA_DB", raising=False)
    monkeypatch.chdir(tmp_path)

    def write(text: str):
        path.write_text(text)
        from ctda_sql.core import config

        config._load.cache_clear()
        return path

    yield write
    from ctda_sql.core import config

    config._load.cache_clear()


def test_the_database_and_format_come_from_the_settings_file(settings, tmp_path, capsys):
    db = tmp_path / "elsewhere.duckdb"
    connect(db).close()
    settings(f'database = "{db}"\nformat = "json"\n')
    assert main(["query", "SELECT 1 AS a"]) == 0
    assert capsys.readouterr().out == '[\n  {"a": 1}\n]\n'
    assert main(["query", "SELECT 1 AS a", "--format", "csv"]) == 0  # the command line wins
    assert capsys.readouterr().out == "a\n1\n"


def test_the_shell_starts_with_the_configured_mode_width_and_timer(settings, tmp_path):
    settings('format = "csv"\nmax_width = 60\nmax_rows = 7\ntimer = true\n')
    state = open_state(str(tmp_path / "t.duckdb"))
    try:
        assert (state.mode, state.max_width, state.max_rows, state.timer) == ("csv", 60, 7, True)
    finally:
        state.con.close()


@pytest.mark.parametrize("text, message", [
    ("colour = 'red'\n", "unknown setting 'colour'"),
    ("max_rows = 'many'\n", "max_rows must be a whole number"),
    ("format = 'xml'\n", "format must be one of"),
    ("key_bindings = 'nano'\n", "key_bindings must be emacs or vi"),
    ("format = \n", "cannot read the settings"),
])
def test_a_bad_settings_file_is_one_error_line_naming_it(settings, capsys, text, message):
    path = settings(text)
    assert main(["query", "SELECT 1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and message in err and len(err.splitlines()) == 1


def test_a_ctda_config_naming_no_file_is_one_error_line(tmp_path, monkeypatch, capsys):
    """Issue 35 (Low): a $CTDA_CONFIG naming a missing file was ignored silently, so the
    settings asked for were not used and nothing said so."""
    missing = tmp_path / "nope.toml"
    monkeypatch.setenv("CTDA_CONFIG", str(missing))
    monkeypatch.chdir(tmp_path)
    assert main(["query", "SELECT 1"]) == 1
    err = capsys.readouterr().err
    assert err == (f"error: $CTDA_CONFIG names {missing}, which does not exist; create it, "
                   "or unset $CTDA_CONFIG for the default settings file\n")
    monkeypatch.setenv("CTDA_CONFIG", str(tmp_path))  # a folder: cannot be read, said in one line
    assert main(["query", "SELECT 1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path}: cannot read the settings") and len(err.splitlines()) == 1
