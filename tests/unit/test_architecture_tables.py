"""ARCHITECTURE.md's list of the temporary tables each SQL stage makes is how a newcomer finds a
table from the stage that makes it: it must say what the stage files' contracts say."""

from __future__ import annotations

import re
from pathlib import Path

from ctda_sql.core import sqlfiles, stages

ARCHITECTURE = Path(__file__).parents[2] / "ARCHITECTURE.md"
ROW = re.compile(r"^\| `(?P<stage>[a-z_]+/[\w*]+)` \| `(?P<tables>[^`]*)` \|$")


def _listed() -> dict[str, set[str]]:
    """{stage glob: tables} of the list's rows."""
    rows = (ROW.match(line) for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines())
    return {row["stage"]: set(row["tables"].split()) for row in rows if row}


def _stage_files(stage_glob: str) -> list[str]:
    """The stage files a row's glob names, as 'folder/name.sql'."""
    folder, pattern = stage_glob.split("/")
    return [f"{folder}/{name}" for name in sqlfiles.names(folder)
            if re.fullmatch(pattern.replace("*", ".*") + r"\.sql", name)]


def _made(stage_glob: str) -> set[str]:
    files = _stage_files(stage_glob)
    assert files, stage_glob
    return {table for name in files for table in stages.contract(name).made}


def test_each_stage_row_lists_the_tables_its_contract_makes():
    listed = _listed()
    assert len(listed) > 20
    made = {stage: _made(stage) for stage in listed}
    wrong = {stage: (sorted(tables - made[stage]), sorted(made[stage] - tables))
             for stage, tables in listed.items() if tables != made[stage]}
    assert wrong == {}, "(listed but not made, made but not listed) per stage"


def test_every_stage_that_makes_a_temporary_table_has_a_row():
    covered = {name for stage in _listed() for name in _stage_files(stage)}
    missing = [f"{folder}/{name}" for folder in ("analysis", "crossrank", "whatif", "advice")
               for name in sqlfiles.names(folder)
               if f"{folder}/{name}" not in covered and stages.contract(f"{folder}/{name}").made]
    assert missing == []
