"""Completion that knows the warehouse: SQL words, tables, columns, functions, dot commands,
report names and parameters, run names and event names inside quotes."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document

from ctda_sql.cli.options import ANALYZE_METHODS, ANALYZE_OPTIONS
from ctda_sql.shell import commands
from ctda_sql.shell.catalog import Catalog

_WORD = re.compile(r"[\w$]*$")
_DOTTED = re.compile(r"(\w+)\.(\w*)$")
_AFTER_TABLE_KEYWORD = re.compile(r"\b(FROM|JOIN|INTO|UPDATE|TABLE|DESCRIBE|SUMMARIZE)\s+(\w*)$", re.I)
# an unclosed quote after `column = '`, `column LIKE '`, `column IN ('...', '`
_QUOTED_VALUE = re.compile(r"(\w+)\s*(?:=|<>|!=|\bI?LIKE\b|\bIN\s*\((?:\s*'[^']*'\s*,)*)\s*'([^']*)$", re.I)
_TABLE_REFERENCE = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)(?:\s+(?:AS\s+)?(\w+))?", re.I)
_NOT_ALIASES = {"where", "join", "on", "group", "order", "limit", "left", "right", "inner", "outer",
                "full", "cross", "using", "natural", "union", "having", "window", "qualify", "as"}


class WarehouseCompleter(Completer):
    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self._paths = PathCompleter(expanduser=True)

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        if commands.is_dot_command(document.text) and "\n" not in text:
            yield from self._dot(text.lstrip(), complete_event)
        else:
            yield from self._sql(text, document.text)

    # ---- dot commands ----------------------------------------------------------------------
    def _dot(self, text: str, event: CompleteEvent) -> Iterable[Completion]:
        name, space, rest = text.partition(" ")
        if not space:
            yield from _matching(name, sorted(commands.REGISTRY), "command")
            return
        command = commands.REGISTRY.get(name.lower())
        if command is None:
            return
        words = _words(rest)
        current = "" if rest.endswith(" ") or not rest else words.pop()
        if command.complete == commands.PATHS:
            yield from self._path(current, event)
        elif command.complete == commands.REPORTS and words and "=" in current:
            key, _, typed = current.partition("=")
            yield from self._parameter_values(words[0], key, typed)
        else:
            yield from _matching(current, self._argument_choices(command, words), "argument",
                                 kinds=self._argument_kinds(command, words))

    def _argument_choices(self, command: commands.DotCommand, before: list[str]) -> list[str]:
        spec = command.complete
        if isinstance(spec, tuple):
            return list(spec) if not before else []
        if spec == commands.TABLES:
            return self.catalog.tables if not before else []
        if spec == commands.COMMANDS:  # .help COMMAND, or .help report NAME
            if before in (["report"], [".report"]):
                return list(self.catalog.reports())
            return sorted(commands.REGISTRY) + ["report"] if not before else []
        if spec == commands.REPORTS:
            return self._report_words(before)
        if spec == commands.ANALYZE:
            return self._analyze_words(before)
        if spec == commands.ADVICE:
            return self._advice_words(command, before)
        return []

    def _argument_kinds(self, command: commands.DotCommand, before: list[str]) -> dict[str, str]:
        """What the menu shows beside a report name (its description) or a parameter (its
        type, default and help)."""
        if command.complete not in (commands.REPORTS, commands.COMMANDS):
            return {}
        reports = self.catalog.reports()
        if command.complete == commands.COMMANDS and before not in (["report"], [".report"]):
            return {}
        if command.complete == commands.COMMANDS or not before:
            return {name: report.description for name, report in reports.items()}
        report = reports.get(before[0])
        return {f"{p.name}=": p.describe().removeprefix(p.name + " ") for p in report.params} if report else {}

    def _report_words(self, before: list[str]) -> list[str]:
        reports = self.catalog.reports()
        if not before:
            return list(reports)
        report = reports.get(before[0])
        given = {word.partition("=")[0] for word in before[1:]}
        return [f"{p.name}=" for p in report.params if p.name not in given] if report else []

    def _parameter_values(self, report_name: str, key: str, typed: str) -> Iterable[Completion]:
        """After `.report NAME run=`: the run names, for a parameter that names a run (run,
        run_a, run_b); quoted when the shell would split them."""
        report = self.catalog.reports().get(report_name)
        if report is None or not any(p.name == key for p in report.params):
            return
        if key == "run" or key.startswith("run_"):
            for name in self.catalog.run_names:
                if name.lower().startswith(typed.lstrip("'\"").lower()):  # also after an opening quote
                    yield Completion(shlex.quote(name), start_position=-len(typed), display=name, display_meta="run")

    def _analyze_words(self, before: list[str]) -> list[str]:
        if before and before[-1] == "--run":
            return self.catalog.run_names
        if before and before[-1] == "--method":
            return list(ANALYZE_METHODS)
        return [option.flag for option in ANALYZE_OPTIONS]

    def _advice_words(self, command: commands.DotCommand, before: list[str]) -> list[str]:
        if before and before[-1] in ("--run", "--run-a", "--run-b"):
            return self.catalog.run_names
        return ["--run", "--rank", "--step", "--top", "--profile-top"] if command.name == ".advise" else ["--run-a", "--run-b", "--rank"]

    def _path(self, current: str, event: CompleteEvent) -> Iterable[Completion]:
        yield from self._paths.get_completions(Document(current, len(current)), event)

    # ---- SQL -------------------------------------------------------------------------------
    def _sql(self, before: str, whole: str) -> Iterable[Completion]:
        if quoted := _QUOTED_VALUE.search(before):
            yield from self._values(quoted.group(1), quoted.group(2), whole)
        elif dotted := _DOTTED.search(before):
            table = _aliases(whole).get(dotted.group(1).lower(), dotted.group(1))
            yield from _matching(dotted.group(2), self._columns_of(table), "column", kinds=self._comments([table]))
        elif table_place := _AFTER_TABLE_KEYWORD.search(before):
            yield from _matching(table_place.group(2), self.catalog.tables, "table")
        else:
            yield from self._anything(_WORD.search(before).group(0), whole)

    def _comments(self, tables: list[str]) -> dict[str, str]:
        """Column -> description over `tables` (the first table naming a column wins)."""
        merged: dict[str, str] = {}
        for table in reversed(tables):
            merged.update(self.catalog.column_comments.get(table.lower(), {}))
        return merged

    def _columns_of(self, table: str) -> list[str]:
        return next((cols for name, cols in self.catalog.columns.items() if name.lower() == table.lower()), [])

    def _anything(self, word: str, whole: str) -> Iterable[Completion]:
        if not word:
            return  # nothing typed yet: a list of a thousand words helps nobody
        mentioned = set(_aliases(whole).values())
        columns = sorted({c for t in mentioned for c in self._columns_of(t)})
        yield from _matching(word, columns, "column", kinds=self._comments(sorted(mentioned)))
        yield from _matching(word, self.catalog.tables, "table")
        yield from _matching(word, [name for name, _ in self.catalog.functions], "function", kinds=dict(self.catalog.functions))
        keywords = self.catalog.keywords if not word.islower() else [k.lower() for k in self.catalog.keywords]
        yield from _matching(word, keywords, "keyword")

    def _values(self, column: str, prefix: str, whole: str) -> Iterable[Completion]:
        tables = set(_aliases(whole).values())
        if _wants_run_names(column.lower(), tables):
            yield from _matching(prefix, self.catalog.run_names, "run")
        elif column.lower() == "name":
            yield from _matching(prefix, self.catalog.event_names(prefix), "event", prefix_only=False)


def _wants_run_names(column: str, tables: set[str]) -> bool:
    if column in ("run", "run_name"):
        return True
    return column == "name" and "runs" in tables and "events" not in tables


def _aliases(sql: str) -> dict[str, str]:
    """alias (or table name) -> table name, for every `FROM t [AS] a` / `JOIN t a`."""
    found = {}
    for table, alias in _TABLE_REFERENCE.findall(sql):
        found[table.lower()] = table
        if alias and alias.lower() not in _NOT_ALIASES:
            found[alias.lower()] = table
    return found


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _matching(prefix: str, candidates: Iterable[str], meta: str, kinds: dict | None = None,
              prefix_only: bool = True) -> Iterable[Completion]:
    """Candidates starting with `prefix` (any case), replacing the typed prefix."""
    lowered = prefix.lower()
    for candidate in candidates:
        if not prefix_only or candidate.lower().startswith(lowered):
            yield Completion(candidate, start_position=-len(prefix), display_meta=(kinds or {}).get(candidate, meta))
