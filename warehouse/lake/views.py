"""Reading a lake: DuckDB views over its Parquet files, one per warehouse table, checked
for damage first (open_lake); the views carry their tables' descriptions."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ctda_sql.core.connection import duckdb_path
from ctda_sql.core.errors import CtdaError
from ctda_sql.core.quoting import quote_identifier, quote_literal
from ctda_sql.lake.integrity import LakeCheck, check_lake, warning_lines
from ctda_sql.lake.store import PARTITIONED, RUNS_FILE, TMP, lake_path, read_runs

# ---- reading -------------------------------------------------------------------------------

def _literal(path: Path, pattern: str = "") -> str:
    """A SQL string of `path` read literally, then `pattern` (a glob below it)."""
    text = str(path)
    if "'" in text or any(ord(c) < 32 for c in text):  # lake_path refuses these; belt and braces
        raise CtdaError(f"lake path {text!r} cannot be read")
    return f"'{duckdb_path(text)}{pattern}'"


def _typed_select(con, table: str, source: str) -> str:
    """SELECT of `table`'s columns in schema order, cast to the schema's types, from `source`;
    generated columns re-computed by their expression."""
    rows = con.execute(
        "SELECT column_name, data_type, is_generated, generation_expression FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name = ? ORDER BY ordinal_position", [table]).fetchall()
    items = []
    for name, data_type, generated, expression in rows:
        if generated != "NEVER":
            items.append(f"CAST({expression} AS {data_type}) AS {quote_identifier(name)}")
        else:
            items.append(f"CAST({quote_identifier(name)} AS {data_type}) AS {quote_identifier(name)}")
    return f"SELECT {', '.join(items)} FROM {source}"


def attach_views(con: duckdb.DuckDBPyConnection, lake: Path, describe: bool = True,
                 read_only_files: bool = False, check: LakeCheck | None = None) -> list[str]:
    """Replace the warehouse tables of `con` (an in-memory warehouse) by views over the lake;
    tables the lake has no file for stay as the schema's empty tables. With `describe`, each
    view keeps its table's COMMENTs (the shell's .schema and completion menus show them).
    With `read_only_files` (--safe), the views read the files through Arrow datasets, so the
    connection's SQL needs no file access at all: DuckDB's allowed_directories would let SQL
    write into the lake too (COPY ... TO 'LAKE/...'). The views read what `check` (default:
    check_lake's) finds to be data: the files the layout names, of the ranks in the lake, that
    are Parquet files. Returns the view names."""
    if check is None:
        check = check_lake(lake, [r["name"] for r in read_runs(lake)])
    sources = {}
    if (lake / RUNS_FILE).is_file():
        if read_only_files:
            con.register("lake_runs", pq.read_table(lake / RUNS_FILE))
            sources["runs"] = "lake_runs"
        else:
            sources["runs"] = f"read_parquet({_literal(lake / RUNS_FILE)})"
    for table in PARTITIONED:
        files = check.data_files(lake, table)
        if not files:
            continue
        if read_only_files:
            con.register(f"lake_{table}", _dataset(lake, table, files))
            sources[table] = f"lake_{table}"
        else:
            listed = ", ".join(_literal(f) for f in files)
            sources[table] = (f"read_parquet([{listed}], hive_partitioning = true, "
                              "hive_types = {'run': VARCHAR, 'rank': INTEGER}, union_by_name = true)")
    comments = _comment_statements(con, list(sources)) if describe else ""
    for table, source in sources.items():
        select = _typed_select(con, table, source)
        con.execute(f"DROP TABLE {quote_identifier(table)}")
        con.execute(f"CREATE VIEW {quote_identifier(table)} AS {select}")
    if comments:
        con.execute(comments)
    return list(sources)


def _dataset(lake: Path, table: str, files: list[Path]):
    """An Arrow dataset of the files with the run and rank of their folders; the files'
    schemas unified (a lake's files may differ in columns, as union_by_name allows)."""
    import pyarrow.dataset as ds

    keys = pa.schema([("run", pa.string()), ("rank", pa.int32())])
    schema = pa.unify_schemas([pq.read_schema(f) for f in files] + [keys])
    return ds.dataset([str(f) for f in files], schema=schema, format="parquet",
                      partitioning=ds.partitioning(keys, flavor="hive"), partition_base_dir=str(lake / table))


def _comment_statements(con, tables: list[str]) -> str:
    """COMMENT ON statements giving the views that replace `tables` the tables' descriptions.
    COMMENT takes no parameters; the texts are the package's own (the schema files, which
    core/column_docs.py gave the tables), quoted."""
    from ctda_sql.core import sqlfiles

    rows = con.execute(sqlfiles.load("lake/table_comments.sql"), {"tables": tables}).fetchall()
    statements = []
    for table, column, comment in rows:
        target = f"VIEW {quote_identifier(table)}" if not column else f"COLUMN {quote_identifier(table)}.{quote_identifier(column)}"
        statements.append(f"COMMENT ON {target} IS {quote_literal(comment)};")
    return "\n".join(statements)



def open_lake(lake_dir: str | Path, for_sql: str | None = None, safe: bool = False,
              macros_for: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory warehouse whose tables are views over the lake at `lake_dir`.

    macros_for: the only SQL a one-shot command will run (see connection.connect): only the
    macros it names are made, and no COMMENTs, which only a browsing session reads (the two
    would be about half of what an open costs)."""
    from ctda_sql.core import sqlfiles
    from ctda_sql.core.connection import connect, lock_out_files

    lake = lake_path(lake_dir, must_exist=True)
    import sys

    check = check_lake(lake, [r["name"] for r in read_runs(lake)])
    for line in warning_lines(lake, check):  # a damaged lake is still read, but never silently
        print(f"warning: {line}", file=sys.stderr)
    one_shot = macros_for is not None
    con = connect(":memory:", for_sql=for_sql, macros_for=macros_for, scratch=one_shot)
    try:
        attach_views(con, lake, describe=not one_shot, read_only_files=safe, check=check)
        sqlfiles.execute(con, "analysis/seed_phase_rules.sql")  # what analyze leaves in a database
        if safe:  # the views read through Arrow: SQL reaches no file, the lake's included
            lock_out_files(con)
    except BaseException:
        con.close()
        raise
    return con


def lake_bytes(lake: Path) -> int:
    return sum(p.stat().st_size for p in lake.rglob("*.parquet") if TMP not in p.parts)
