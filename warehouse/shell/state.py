"""What one shell session remembers between inputs: connection, output settings, dialect."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import duckdb

from ctda_sql.cli.output import DEFAULT_TABLE_ROWS, TextStyle
from ctda_sql.core.connection import attached
from ctda_sql.core.errors import CtdaError


@dataclass
class Result:
    """What a dot command gives back: a table, an executed cursor whose rows are printed as
    they are fetched, or a status message."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    message: str | None = None
    cursor: duckdb.DuckDBPyConnection | None = None


@dataclass
class Script:
    """Input to run as if typed (what `.read` gives back): its dot commands take effect in
    order, so a `.mode` or `.output` in a file changes how the lines after it print."""

    text: str


@dataclass
class ShellState:
    con: duckdb.DuckDBPyConnection
    db_path: Path
    read_only: bool = False
    mode: str = "table"
    timer: bool = False
    dialect: str = "duckdb"
    output_file: TextIO | None = None
    output_path: str | None = None
    quit_requested: bool = False
    # typed at a prompt (status lines shown) or read from a pipe as a batch
    interactive: bool = True
    # tables show this many rows and count the rest; the other modes print every row
    max_rows: int = DEFAULT_TABLE_ROWS
    # widest table (.maxwidth): None fits the terminal, 0 is no limit
    max_width: int | None = None
    # a Parquet lake: the connection holds views over its files, so nothing is attached
    lake: bool = False
    # --safe: SQL reaches no file but the warehouse, and .read reads none
    safe: bool = False
    # .headers, .nullvalue, .separator: how csv, tsv and list print (None: the format's own)
    headers: bool = True
    null_text: str | None = None
    separator: str | None = None
    # .once: the output file takes the next result only
    output_once: bool = False
    # completion cache, told to forget after DDL and ingest (set by the app)
    on_schema_change: list = field(default_factory=list)

    def holding(self, write: bool = False):
        """The database file attached while the block runs; read-write only when `write`
        and the session may write. Between inputs the session holds no lock on it."""
        if self.lake:
            return contextlib.nullcontext()
        return attached(self.con, self.db_path, write=write and not self.read_only)

    def out(self) -> TextIO:
        """Where results go: the .output file, else the current stdout."""
        return self.output_file or sys.stdout

    def schema_changed(self) -> None:
        for callback in self.on_schema_change:
            callback()

    def set_output(self, path: str | None, once: bool = False) -> None:
        if self.output_file is not None:
            self.output_file.close()
        self.output_file = open(path, "w", encoding="utf-8") if path else None  # noqa: SIM115
        self.output_path = path
        self.output_once = once and path is not None

    def result_shown(self) -> None:
        """Called after each result: a .once file has had its one, and output goes back to the screen."""
        if self.output_once:
            self.set_output(None)

    def style(self) -> TextStyle:
        if self.separator and len(self.separator) != 1 and self.mode in ("csv", "tsv"):
            raise CtdaError(f"{self.mode} takes a one-character .separator, not {self.separator!r}; "
                            ".mode list takes any")
        return TextStyle(self.headers, self.null_text, self.separator)
