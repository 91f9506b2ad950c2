"""What one shell session remembers between inputs: connection, output settings, dialect."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import duckdb


@dataclass
class Result:
    """What every input gives back, SQL or dot command: a table, or a status message."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    message: str | None = None
    truncated: bool = False


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
    # tables shown at most this many rows; larger results say they were cut
    max_rows: int = 10_000
    # completion cache, told to forget after DDL and ingest (set by the app)
    on_schema_change: list = field(default_factory=list)

    def out(self) -> TextIO:
        """Where results go: the .output file, else the current stdout."""
        return self.output_file or sys.stdout

    def schema_changed(self) -> None:
        for callback in self.on_schema_change:
            callback()

    def set_output(self, path: str | None) -> None:
        if self.output_file is not None:
            self.output_file.close()
        self.output_file = open(path, "w", encoding="utf-8") if path else None  # noqa: SIM115
        self.output_path = path
