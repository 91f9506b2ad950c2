"""SQL stages: the .sql files that pass data to each other in temporary tables (sql/analysis,
sql/crossrank, sql/whatif, sql/advice, sql/lake, sql/ingest), their contracts and one runner.

Each stage file opens with its contract, one field a line:

    -- reads: events, steps, cp_windows                 tables it reads (temporary or persistent)
    -- registered: wi_result_steps                      Arrow tables its Python caller registers
    -- makes: cp_nodes(run_id, rank, step, node_id,     a table it creates, with its columns in
    --                 kind, label)                     order (wrapped lines continue the list)
    -- makes: rows(kind, label, path_us)                the rows its last statement returns
    -- makes macro: wi_bus_factor(collective, n)        a temporary macro, with its parameters
    -- writes: nodes, edges                             persistent tables it inserts into or deletes from
    -- param: run_id INTEGER                            a parameter, as queries/*.sql declare them

Text after a `makes:` list, and a parenthesized note in a `reads:` list, is prose. The run
order of a group of stages follows from the contracts (`ordered`): a stage runs after the
stages that make or write what it reads; file names break ties."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import duckdb

from ctda_sql.core import sqlfiles
from ctda_sql.core.errors import CtdaError
from ctda_sql.core.transaction import is_interruption

_FIELD = re.compile(r"^--\s*(reads|registered|makes macro|makes|writes|param):\s*(.*)$")
_NAME = re.compile(r"[A-Za-z_]\w*")
_NOTE = re.compile(r"\([^()]*\)")
# `rows` in a makes line: the stage's result set, not a table
RESULT = "rows"


@dataclass(frozen=True)
class Contract:
    reads: tuple[str, ...] = ()
    registered: tuple[str, ...] = ()
    makes: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (table, columns); RESULT for the rows returned
    macros: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (macro, parameters)
    writes: tuple[str, ...] = ()
    params: tuple[tuple[str, str], ...] = ()              # (name, type)

    @property
    def made(self) -> tuple[str, ...]:
        """The tables and macros it makes (not its result rows)."""
        return tuple(name for name, _ in self.makes + self.macros if name != RESULT)


@lru_cache(maxsize=None)
def contract(name: str) -> Contract:
    """The contract at the top of the stage file `name` (e.g. 'analysis/40_edges.sql')."""
    return parse_contract(sqlfiles.load(name))


def parse_contract(text: str) -> Contract:
    """The contract of a stage file's text: its field lines, read from the first line of the
    file to the first line that is neither a field nor the wrapped rest of one (prose may
    follow the contract, and may use the same words)."""
    fields: dict[str, list] = {key: [] for key in ("reads", "registered", "makes", "makes macro", "writes", "param")}
    for key, value in _field_values(text.splitlines()):
        if key in ("makes", "makes macro"):
            fields[key].append(_made_table(value))
        elif key == "param":
            fields[key].append(_param(f"-- param: {value}"))
        else:
            fields[key] += [_table_name(item) for item in _NOTE.sub("", value).split(",") if item.strip()]
    return Contract(tuple(fields["reads"]), tuple(fields["registered"]), tuple(fields["makes"]),
                    tuple(fields["makes macro"]), tuple(fields["writes"]), tuple(fields["param"]))


def _table_name(item: str) -> str:
    """The table a `reads:` / `writes:` item names; a contract line that names none is an
    error naming the line, not an AttributeError."""
    found = _NAME.match(item.strip())
    if found is None:
        raise ValueError(f"stage contract: {item.strip()!r} names no table")
    return found.group(0)


def _field_values(lines: list[str]) -> list[tuple[str, str]]:
    """(field, value) of the contract's lines; a value whose parentheses are still open, or
    a list that ends with a comma, goes on over the next comment lines."""
    values, index = [], 0
    while index < len(lines) and (match := _FIELD.match(lines[index].strip())):
        key, value = match.groups()
        index += 1
        while (value.count("(") > value.count(")") or value.rstrip().endswith(",")) and index < len(lines) \
                and lines[index].lstrip().startswith("--") and not _FIELD.match(lines[index].strip()):
            value += " " + lines[index].strip()[2:].strip()
            index += 1
        values.append((key, value))
    return values


def _made_table(value: str) -> tuple[str, tuple[str, ...]]:
    """'cp_nodes(run_id, rank) prose' -> ('cp_nodes', ('run_id', 'rank'))."""
    match = re.match(r"\s*([A-Za-z_]\w*)\s*\(([^()]*)\)", value)
    if not match:
        raise CtdaError(f"a stage contract's makes line needs name(columns): {value.strip()!r}")
    return match.group(1), tuple(column.strip() for column in match.group(2).split(",") if column.strip())


def _param(line: str) -> tuple[str, str]:
    match = sqlfiles.PARAM_LINE.match(line)
    if not match:
        raise CtdaError(f"a stage contract's param line needs a name and a type: {line!r}")
    return match["name"], match["type"].upper()


@lru_cache(maxsize=None)
def ordered(folder: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` (files of `folder`) in the order their contracts ask: each after the stages
    that make a table or macro it reads, otherwise by file name. Tables none of them makes
    are taken as there already (persistent, or made by an earlier group of stages). A
    persistent table that one stage writes and others read gives no order (crossrank reads
    `traces` before 20_match writes its clock offsets, and after): file names keep that."""
    contracts = {name: contract(f"{folder}/{name}") for name in names}
    needs = {name: {other for other in names if other != name and
                    set(contracts[name].reads) & set(contracts[other].made)}
             for name in names}
    order: list[str] = []
    while len(order) < len(names):
        ready = sorted(name for name in names if name not in order and needs[name] <= set(order))
        if not ready:
            raise CtdaError(f"the stages of {folder} read each other's tables in a cycle: "
                            f"{sorted(set(names) - set(order))}")
        order.append(ready[0])
    return tuple(order)


def run_stages(con: duckdb.DuckDBPyConnection, folder: str, names: tuple[str, ...], params: dict,
               what: str, after_each=lambda: None) -> None:
    """Run the stage files `names` of `folder` in their contracts' order (`ordered`)."""
    for name in ordered(folder, tuple(names)):
        run_stage(con, f"{folder}/{name}", params, what)
        after_each()


def run_stage(con: duckdb.DuckDBPyConnection, name: str, params: dict, what: str = "stage",
              rows: bool = False) -> tuple[list[str], list[tuple]] | None:
    """Run every statement of the SQL file `name`, each with the parameters it names from
    `params`; with `rows`, return the last statement's column names and rows (a stage that
    `makes: rows`). A failing statement is one CtdaError naming `what`, the file and the
    statement's first line; Ctrl-C, however DuckDB surfaced it, passes through as it came."""
    for statement, names in sqlfiles.parameterized_statements(sqlfiles.load(name)):
        try:
            con.execute(statement, {key: params[key] for key in names}) if names else con.execute(statement)
        except duckdb.Error as exc:
            if is_interruption(exc):
                raise
            first = str(exc).strip().splitlines()[0]
            raise CtdaError(f"{what} {name} failed: {first} [{statement_label(statement)}]") from exc
    if not rows:
        return None
    return [d[0] for d in con.description or []], con.fetchall()


def statement_label(statement: str) -> str:
    """The statement's first code line, to say which one failed."""
    code = [line.strip() for line in statement.splitlines() if line.strip() and not line.strip().startswith("--")]
    return code[0][:80] if code else ""
