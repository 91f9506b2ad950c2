"""Transpile SQL written for other engines (Postgres, MySQL, ...) into DuckDB SQL with sqlglot.

Postgres divides integers as integers (7 / 2 = 3) where DuckDB gives 3.5. sqlglot keeps the
source semantics only when it knows both operands are integers, so the warehouse's column
types are handed to it: `FLOOR(step / 50) * 50` becomes `FLOOR(CAST(TRUNC(step / 50) AS BIGINT)) * 50`.
"""

from __future__ import annotations

from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from ctda_sql.core.errors import CtdaError

# table name (lower case) -> column name (lower case) -> DuckDB type name
ColumnTypes = dict[str, dict[str, str]]


def to_duckdb(sql: str, dialect: str | None, column_types: ColumnTypes | None = None) -> str:
    """`sql` unchanged for duckdb, else transpiled; a parse error becomes a CtdaError."""
    if not dialect or dialect.lower() == "duckdb":
        return sql
    read = _dialect(dialect)
    try:
        trees = [tree for tree in sqlglot.parse(sql, read=read) if tree is not None]
    except ParseError as exc:
        raise CtdaError(f"cannot parse the {dialect} SQL: {str(exc).splitlines()[0]}") from None
    return ";\n".join(_typed(tree, read, column_types or {}).sql(dialect="duckdb") for tree in trees)


def _dialect(name: str) -> str:
    try:
        sqlglot.Dialect.get_or_raise(name.lower())
    except ValueError as exc:
        raise CtdaError(f"unknown dialect {name!r} ({str(exc).splitlines()[0]})") from None
    return name.lower()


def _typed(tree: exp.Expr, dialect: str, column_types: ColumnTypes) -> exp.Expr:
    """`tree` with types on literals, expressions and the warehouse's columns where known."""
    from sqlglot.optimizer.annotate_types import annotate_types

    try:
        tree = annotate_types(tree, dialect=dialect)
    except SqlglotError:
        return tree  # untyped SQL still transpiles, only integer division stays DuckDB's
    tables = {table.name.lower() for table in tree.find_all(exp.Table)}
    for column in tree.find_all(exp.Column):
        type_name = _column_type(column.name.lower(), tables, column_types)
        if type_name and (column.type is None or column.type.is_type(exp.DataType.Type.UNKNOWN)):
            column.type = exp.DataType.build(type_name, dialect="duckdb", udt=True)
    return tree


def _column_type(column: str, tables: set[str], column_types: ColumnTypes) -> str | None:
    """The column's type when every referenced table that has it agrees."""
    found = {column_types[t][column] for t in tables if column in column_types.get(t, {})}
    return found.pop() if len(found) == 1 else None


def warehouse_column_types(con) -> ColumnTypes:
    types: ColumnTypes = {}
    for table, column, data_type in con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
    ).fetchall():
        types.setdefault(table.lower(), {})[column.lower()] = data_type
    return types


def transpile_query(sql: str, dialect: str | None, db_path: Path) -> str:
    """`ctda-sql query --dialect`: transpiled with the column types of the database, if any."""
    if not dialect or dialect.lower() == "duckdb":
        return sql
    column_types: ColumnTypes = {}
    if db_path.exists():
        from ctda_sql.core.connection import connect

        con = connect(db_path, read_only=True, for_sql="")  # only the catalogue is read
        try:
            column_types = warehouse_column_types(con)
        finally:
            con.close()
    return to_duckdb(sql, dialect, column_types)
