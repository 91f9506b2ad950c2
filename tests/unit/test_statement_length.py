"""No statement in sql/ is over 100 lines: a longer one reads better as named steps (private
temp tables `_name`, or macros), each with a line saying what it holds. A statement is
counted from its first code line (the comments before it are not part of it) to its `;`."""

from __future__ import annotations

import pytest

from ctda_sql.core import sqlfiles

from helpers.modules import package_sql_files

LIMIT = 100


def sql_files() -> list[str]:
    """Every .sql file of the sql package, as 'folder/name.sql'."""
    return package_sql_files("ctda_sql.sql")


def statement_lengths(text: str) -> list[tuple[int, str, int]]:
    """(line number of its first code line, that line, its length in lines) of each statement,
    split as the stage runner splits them (sqlfiles.parameterized_statements)."""
    lengths, line_number = [], 1
    for statement, _ in sqlfiles.parameterized_statements(text):
        lines = statement.splitlines()
        first = next((i for i, line in enumerate(lines) if line.strip() and not line.strip().startswith("--")), None)
        if first is not None:
            last = max(i for i, line in enumerate(lines) if line.strip())
            lengths.append((line_number + first, lines[first].strip(), last - first + 1))
        line_number += len(lines)
    return lengths


def test_the_sql_files_are_found():
    assert {"analysis/40_edges.sql", "export/overlay_events.sql", "schema.sql"} <= set(sql_files())


@pytest.mark.parametrize("name", sql_files())
def test_no_statement_is_over_100_lines(name):
    long = [f"sql/{name}:{line} ({first[:60]}) is {length} lines"
            for line, first, length in statement_lengths(sqlfiles.load(name)) if length > LIMIT]
    assert not long, f"over {LIMIT} lines, split into named steps: " + "; ".join(long)


def test_a_statement_counts_from_its_first_code_line_to_its_semicolon():
    text = ("-- a header\n\nSELECT 1;\n"
            "-- what it holds\nCREATE TEMP TABLE t AS\nSELECT 1 AS a\n-- a comment inside counts\nFROM x;\n")
    assert statement_lengths(text) == [(3, "SELECT 1;", 1), (5, "CREATE TEMP TABLE t AS", 4)]


def test_a_statement_of_101_lines_is_reported_with_its_file_line():
    text = "SELECT 1;\n\n-- steps\nSELECT\n" + "    1,\n" * 99 + "    2;\n"
    assert statement_lengths(text)[1] == (4, "SELECT", 101)
