"""What completion knows about the warehouse, fetched lazily and cached between keystrokes."""

from __future__ import annotations

import contextlib
from functools import cached_property

import duckdb

from ctda_sql.core import sqlfiles
from ctda_sql.core.errors import CtdaError

# the LIMIT of shell/event_names.sql
EVENT_NAME_LIMIT = 50


class Catalog:
    """Tables, columns, functions, keywords, reports, run and event names of one database.

    Queries use the session's own connection: temporary macros and UDFs live only there, and
    completion runs while no query does. `forget()` drops what DDL or an ingest may change.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, holding=contextlib.nullcontext):
        self._con = con
        self._holding = holding  # attaches the database file around each catalogue query
        self._event_names: dict[str, list[str]] = {}

    def _rows(self, sql: str, params=None) -> list[tuple]:
        try:
            with self._holding():
                return self._con.execute(sql, params).fetchall()
        except (duckdb.Error, CtdaError):
            return []  # e.g. no events table yet, or a writer holds the file: nothing to offer

    def forget(self) -> None:
        for name in ("columns", "column_comments", "_column_rows", "run_names"):
            self.__dict__.pop(name, None)
        self._event_names.clear()

    @cached_property
    def columns(self) -> dict[str, list[str]]:
        """Table or view name -> its column names, in order."""
        tables: dict[str, list[str]] = {}
        for table, column, _ in self._column_rows:
            tables.setdefault(table, []).append(column)
        return tables

    @cached_property
    def column_comments(self) -> dict[str, dict[str, str]]:
        """Table name (lower case) -> column -> its description (COMMENT ON), for the menu."""
        comments: dict[str, dict[str, str]] = {}
        for table, column, comment in self._column_rows:
            if comment:
                comments.setdefault(table.lower(), {})[column] = comment
        return comments

    @cached_property
    def _column_rows(self) -> list[tuple[str, str, str | None]]:
        return self._rows(sqlfiles.load("shell/catalog_columns.sql"))

    @property
    def tables(self) -> list[str]:
        return sorted(self.columns)

    @cached_property
    def functions(self) -> list[tuple[str, str]]:
        """(name, kind) of every function, macro and UDF."""
        return [(name, kind) for name, kind, _ in self._rows(sqlfiles.load("shell/catalog_functions.sql"))]

    @cached_property
    def keywords(self) -> list[str]:
        return sorted(row[0].upper() for row in self._rows("SELECT keyword_name FROM duckdb_keywords()"))

    @cached_property
    def run_names(self) -> list[str]:
        return [row[0] for row in self._rows(sqlfiles.load("shell/run_names.sql"))]

    def event_names(self, prefix: str) -> list[str]:
        """The most frequent event names starting with `prefix`, cached per prefix."""
        if prefix not in self._event_names:
            self._event_names[prefix] = self._narrowed(prefix) or self._fetch_event_names(prefix)
        return self._event_names[prefix]

    def _narrowed(self, prefix: str) -> list[str] | None:
        # a shorter prefix whose list was not cut by the LIMIT already holds every match
        for known, names in self._event_names.items():
            if prefix.lower().startswith(known.lower()) and len(names) < EVENT_NAME_LIMIT:
                return [n for n in names if n.lower().startswith(prefix.lower())]
        return None

    def _fetch_event_names(self, prefix: str) -> list[str]:
        pattern = _escape_like(prefix) + "%"
        return [row[0] for row in self._rows(sqlfiles.load("shell/event_names.sql"), [pattern])]

    def reports(self) -> dict:
        from ctda_sql.engine.reports import all_reports

        try:
            return all_reports()
        except Exception:  # a broken user report folder must not break typing
            return {}


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
