"""Commands that read what ingest made (analyze, whatif, advise, diff) on a --db that does not
exist: one `error:` line naming the file, a non-zero exit, and no empty database left behind
(a typo in --db used to create a file that the next command then read as an empty warehouse)."""

from __future__ import annotations

import pytest

from ctda_sql.shell.entry import main

COMMANDS = [
    ["analyze"],
    ["whatif", "--run", "r", "--scale", "cpu_op:*=0.5"],
    ["advise", "--run", "r"],
    ["diff", "--run-a", "a", "--run-b", "b"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_missing_database_is_an_error_and_stays_missing(tmp_path, capsys, command):
    db = tmp_path / "typo.duckdb"
    assert main(["--db", str(db), *command]) != 0
    err = capsys.readouterr().err
    assert err.startswith("error: no database at ") and str(db) in err
    assert "Traceback" not in err
    assert not db.exists()
