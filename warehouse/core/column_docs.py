"""The description of each warehouse table and column, read from where it is defined (the
schema files, as Perfetto's stdlib documents its tables), and the COMMENT ON statements that
give DuckDB the same texts for `.schema TABLE`, completion and duckdb_columns().

The convention, checked strictly (a break is a SchemaDocError naming the file, table and column):
- the `--` lines directly above a CREATE TABLE describe the table; those directly above a
  column's line in it, or above an `ALTER TABLE ... ADD COLUMN` that adds a new column, describe
  the column. "Directly": no blank line between. Several lines join with a space;
- a comment after the code on a definition's line is a note for whoever edits the file, never
  shown;
- an ALTER TABLE that adds a column its CREATE TABLE already has (a migration for older
  databases) carries no description; nor does a table constraint (PRIMARY KEY ...);
- every table and column has exactly one description, and a schema file holds no COMMENT ON."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

import duckdb

from ctda_sql.core import sqlfiles
from ctda_sql.core.quoting import quote_identifier, quote_literal

_TABLE_START = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?TABLE\b", re.I)
_CREATE_TABLE = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\s*\(\s*$", re.I)
_ADD_COLUMN = re.compile(r"ALTER\s+TABLE\s+(\w+)\s+ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)
_COMMENT_ON = re.compile(r"COMMENT\s+ON\b", re.I)
_COLUMN_NAME = re.compile(r"[A-Za-z_]\w*")
_CONSTRAINTS = {"PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "CONSTRAINT"}


class SchemaDocError(ValueError):
    """A schema file breaks the documentation convention."""


@dataclass
class TableDoc:
    description: str
    columns: dict[str, str] = field(default_factory=dict)  # column -> description, in file order


@dataclass
class _Statement:
    description: list[str]  # the `--` lines directly above it, without their `--`
    lines: list[str]        # its lines, comments and all
    line_number: int        # of its first line, from 1


def schema_files() -> list[str]:
    """The schema files in the order a writable open runs them (core/connection.py)."""
    return ["schema.sql"] + [f"schema/{name}" for name in sqlfiles.names("schema")]


@lru_cache(maxsize=None)
def schema_docs() -> dict[str, TableDoc]:
    """Table -> its description and its columns' descriptions, over every schema file."""
    docs: dict[str, TableDoc] = {}
    for name in schema_files():
        read_docs(sqlfiles.load(name), name, docs)
    return docs


def read_docs(text: str, file_name: str, docs: dict[str, TableDoc]) -> None:
    """Add the tables and columns `text` (one schema file) defines to `docs`."""
    for statement in _statements(text):
        code = " ".join(_code(line) for line in statement.lines).strip()
        where = f"{file_name}:{statement.line_number}"
        if _COMMENT_ON.match(code):
            raise SchemaDocError(f"{where}: COMMENT ON in a schema file; describe the table or column "
                                 "with -- lines directly above its definition")
        if _TABLE_START.match(code):
            _read_table(statement, file_name, docs)
        elif (added := _ADD_COLUMN.match(code)) and added[2].upper() not in _CONSTRAINTS:
            _read_added_column(added[1].lower(), added[2].lower(), statement, where, docs)


def _read_table(statement: _Statement, file_name: str, docs: dict[str, TableDoc]) -> None:
    """A CREATE TABLE: its first line opens the column list, its last line closes it."""
    where = f"{file_name}:{statement.line_number}"
    header = _CREATE_TABLE.match(_code(statement.lines[0]).strip())
    if header is None or len(statement.lines) < 3 or not _code(statement.lines[-1]).strip().startswith(")"):
        raise SchemaDocError(f"{where}: write CREATE TABLE name ( on a line of its own, each column "
                             "on its own line, and ); on the last")
    table = header[1].lower()
    if table in docs:
        raise SchemaDocError(f"{where}: table {table} is created twice")
    docs[table] = TableDoc(_required(statement.description, f"{where}: table {table}"))
    pending: list[str] = []
    continues = False  # the previous column's definition goes on over this line
    for number, line in enumerate(statement.lines[1:-1], start=statement.line_number + 1):
        place = f"{file_name}:{number}"
        code = _code(line).strip()
        if not code:
            pending = pending + [_comment_text(line)] if line.strip() else []
            continue
        if not continues:
            _read_column_line(code, table, pending, place, docs)
        elif pending:
            raise SchemaDocError(f"{place}: table {table}: a description inside a column's definition")
        pending = []
        continues = not code.endswith(",")
    if pending:
        raise SchemaDocError(f"{where}: table {table}: a description after its last column")


def _read_column_line(code: str, table: str, pending: list[str], place: str,
                      docs: dict[str, TableDoc]) -> None:
    word = _COLUMN_NAME.match(code)
    if word is None:
        raise SchemaDocError(f"{place}: table {table}: cannot read a column name in {code!r}")
    if word[0].upper() in _CONSTRAINTS:
        if pending:
            raise SchemaDocError(f"{place}: table {table}: a description above a constraint")
        return
    column = word[0].lower()
    if column in docs[table].columns:
        raise SchemaDocError(f"{place}: column {table}.{column} is defined twice")
    docs[table].columns[column] = _required(pending, f"{place}: column {table}.{column}")


def _read_added_column(table: str, column: str, statement: _Statement, where: str,
                       docs: dict[str, TableDoc]) -> None:
    if table not in docs:
        raise SchemaDocError(f"{where}: ALTER TABLE {table} before a schema file creates {table}")
    if column in docs[table].columns:
        if statement.description:
            raise SchemaDocError(f"{where}: column {table}.{column} is described twice (its "
                                 "CREATE TABLE describes it; this ALTER only adds it to older databases)")
        return
    docs[table].columns[column] = _required(statement.description, f"{where}: column {table}.{column}")


def _required(description: list[str], what: str) -> str:
    text = " ".join(description).strip()
    if not text:
        raise SchemaDocError(f"{what} has no description: write it in -- lines directly above "
                             "its definition")
    return text


def _statements(text: str) -> list[_Statement]:
    """Each statement of a schema file with the comment block directly above it; a statement
    ends with the code line that ends with `;`."""
    statements: list[_Statement] = []
    pending: list[str] = []
    current: _Statement | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        code = _code(line).strip()
        if current is None:
            if not line.strip():
                pending = []
                continue
            if not code:
                pending.append(_comment_text(line))
                continue
            current, pending = _Statement(pending, [], number), []
            statements.append(current)
        current.lines.append(line)
        if code.endswith(";"):
            current = None
    return statements


def _code(line: str) -> str:
    """`line` without its `--` comment (a `--` inside a quoted string stays)."""
    quoted = False
    for index, char in enumerate(line):
        if char == "'":
            quoted = not quoted
        elif not quoted and line.startswith("--", index):
            return line[:index]
    return line


def _comment_text(line: str) -> str:
    return line.strip().removeprefix("--").strip()


@lru_cache(maxsize=None)
def comment_statements(tables: tuple[str, ...] | None = None) -> str:
    """COMMENT ON each table of `tables` (None: every table of the schema files) and on each of
    its documented columns. COMMENT takes no parameters: names and texts are quoted."""
    docs = schema_docs()
    statements = []
    for table in docs if tables is None else tables:
        name = quote_identifier(table)
        statements.append(f"COMMENT ON TABLE {name} IS {quote_literal(docs[table].description)};")
        statements += [f"COMMENT ON COLUMN {name}.{quote_identifier(column)} IS {quote_literal(text)};"
                       for column, text in docs[table].columns.items()]
    return "\n".join(statements)


def describe_tables(con: duckdb.DuckDBPyConnection, tables: Iterable[str] | None = None) -> None:
    """Give `tables` (None: all of the schema files') and their columns their descriptions,
    in one call: a call per statement would cost more than the statements."""
    con.execute(comment_statements(None if tables is None else tuple(tables)))
