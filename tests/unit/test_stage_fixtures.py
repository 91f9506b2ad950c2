"""One SQL stage at a time, on a handful of rows written and worked out by hand: a fixture file
per stage under tests/fixtures/stages/<folder>/ (a stage may have more: crossrank/match_*.txt),
in the manner of sqlglot's fixture file per optimizer rule (tests/fixtures/optimizer/<rule>.sql
there). Each file gives the stage's input
tables (only the columns it reads), its parameters and the rows it must make; the test makes
the inputs as TEMP tables on a fresh connection (schema and macros from connect(":memory:"), a
TEMP table shadows a persistent one of the same name), runs the one stage through
core.stages.run_stage and compares.

The expected rows are derived by hand, each with a comment that says why it is there; they
are never regenerated from the code's output (no --update: that would copy the code's answers).

Fixture format (a text file; `--` lines that are not fields are prose, and comments may follow
a row):

    -- stage: analysis/edges          the stage file, without its numeric prefix (an ordering
                                      detail that may change: whatif/05_rules became 17_rules)
    -- param: sync_tolerance_us = 1.0 a parameter, its value in JSON (null, [..], "text")
    -- input: cp_nodes(node_id BIGINT, kind VARCHAR,
    --                 start_us DOUBLE)  a TEMP table; the column list may wrap over `--` lines
    (1, 'cpu', 0.0),                  its rows, as DuckDB VALUES rows (none: an empty table)
    (2, 'gpu', 5.0)
    -- expect: cp_edges(src, dst, type) ORDER BY src, dst
    (1, 2, 'call')                    the rows of those columns of a table (or view) the stage
                                      makes, in the ORDER BY given (default: the columns listed);
                                      each value is cast to the made column's type
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ctda_sql.core import sqlfiles, stages
from ctda_sql.core.connection import connect

# tests/fixtures/stages, from this file wherever it sits under tests/
FIXTURES = next(p for p in Path(__file__).resolve().parents if p.name == "tests") / "fixtures" / "stages"
_FIELD = re.compile(r"^--\s*(stage|param|input|expect):\s*(.*)$")
_TABLE = re.compile(r"^\s*([A-Za-z_]\w*)\s*\((.*)\)\s*(?:ORDER\s+BY\s+(.+?))?\s*$", re.I | re.S)


@dataclass
class Table:
    name: str
    columns: list[str]   # 'name TYPE' for an input, 'name' for an expectation
    order_by: str
    lines: list[str] = field(default_factory=list)  # the fixture's lines after the field

    @property
    def rows(self) -> str:
        """The VALUES rows' text; '' when the lines hold only prose."""
        has_code = any(line.strip() and not line.strip().startswith("--") for line in self.lines)
        return "\n".join(self.lines) if has_code else ""


@dataclass
class Fixture:
    stage: str = ""
    params: dict = field(default_factory=dict)
    inputs: list[Table] = field(default_factory=list)
    expects: list[Table] = field(default_factory=list)


def fixture_files() -> list[Path]:
    return sorted(FIXTURES.rglob("*.txt"))


def parse_fixture(text: str) -> Fixture:
    fixture, lines, index, table = Fixture(), text.splitlines(), 0, None
    while index < len(lines):
        match = _FIELD.match(lines[index].strip())
        index += 1
        if not match:
            if table is not None:
                table.lines.append(lines[index - 1])
            continue
        key, value = match.groups()
        while value.count("(") > value.count(")") and index < len(lines) and lines[index].lstrip().startswith("--"):
            value += " " + lines[index].strip()[2:].strip()
            index += 1
        table = None
        if key == "stage":
            fixture.stage = value.strip()
        elif key == "param":
            name, _, literal = value.partition("=")
            fixture.params[name.strip()] = json.loads(literal)
        else:
            table = _table(value)
            (fixture.inputs if key == "input" else fixture.expects).append(table)
    return fixture


def _table(value: str) -> Table:
    match = _TABLE.match(value)
    assert match, f"a fixture's input or expect needs table(columns): {value!r}"
    name, columns, order_by = match.groups()
    columns = [column.strip() for column in columns.split(",") if column.strip()]
    return Table(name, columns, order_by or ", ".join(c.split()[0] for c in columns))


def stage_file(stage: str) -> str:
    """'whatif/rules' -> 'whatif/17_rules.sql': the one file of the folder of that name, with
    or without a numeric prefix."""
    folder, name = stage.removesuffix(".sql").rsplit("/", 1)
    name = re.sub(r"^\d+_", "", name)
    found = [n for n in sqlfiles.names(folder) if re.sub(r"^\d+_", "", n) == f"{name}.sql"]
    assert len(found) == 1, f"stage {stage!r}: found {found} in sql/{folder}"
    return f"{folder}/{found[0]}"


def run_fixture(fixture: Fixture):
    """A connection on which the fixture's inputs were made and its stage ran."""
    con = connect(":memory:")
    for table in fixture.inputs:
        con.execute(f"CREATE TEMP TABLE {table.name} ({', '.join(table.columns)})")
        if table.rows:
            con.execute(f"INSERT INTO {table.name} VALUES {table.rows}")
    stages.run_stage(con, stage_file(fixture.stage), fixture.params, "fixture stage")
    return con


def rows_made(con, table: Table) -> list[tuple]:
    return con.execute(f"SELECT {', '.join(table.columns)} FROM {table.name} ORDER BY {table.order_by}").fetchall()


def rows_expected(con, table: Table, number: int) -> list[tuple]:
    """The fixture's rows, each value cast to the type of the column the stage made."""
    expected = f"_expected_{number}"
    con.execute(f"CREATE TEMP TABLE {expected} AS SELECT {', '.join(table.columns)} FROM {table.name} LIMIT 0")
    if table.rows:
        con.execute(f"INSERT INTO {expected} VALUES {table.rows}")
    return con.execute(f"SELECT * FROM {expected} ORDER BY {table.order_by}").fetchall()


def test_at_least_six_stages_have_fixtures():
    covered = {stage_file(parse_fixture(path.read_text()).stage) for path in fixture_files()}
    assert len(covered) >= 6, covered


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_the_stage_makes_the_rows_derived_by_hand(path):
    fixture = parse_fixture(path.read_text())
    contract = stages.contract(stage_file(fixture.stage))
    # the fixture speaks of the stage's own tables: it reads its inputs, makes what is expected
    assert {t.name for t in fixture.inputs} <= set(contract.reads) | set(contract.registered)
    assert {t.name for t in fixture.expects} <= set(contract.made) | set(contract.writes)
    assert {name for name, _ in contract.params} == set(fixture.params)
    con = run_fixture(fixture)
    try:
        for number, table in enumerate(fixture.expects):
            assert rows_made(con, table) == rows_expected(con, table, number), f"{path.name}: {table.name}"
    finally:
        con.close()
