"""Where a warehouse's bytes go (issue 32): the DuckDB file after `ingest` and after `analyze`
(every method, the CLI's default), against the trace's raw JSON, and each table's share.

Per table: the blocks of the file its segments lie in (pragma_storage_info: block_id and
additional_block_ids; a block is 256 KiB by default and no two tables shared one), and its
payload: the bytes it adds to an empty file with 16 KiB blocks when copied there alone with its
own DDL (compression settings kept), since pragma_storage_info lists segments, not their
sizes. The file's size is taken after a CHECKPOINT, with its free blocks beside it.

Usage: python bench/storage_breakdown.py [--targets ns_resolution nccl ...] [--code-dir DIR]
       (default targets: every shared trace whose raw JSON is over 1 MB)
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_checkout import use_checkout  # noqa: E402

from common import REPO_DIR, traces_dir  # noqa: E402

MB = 1e6


def raw_bytes(path: Path) -> int:
    if path.is_dir():
        return sum(raw_bytes(p) for p in sorted(path.glob("*.json*")))
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return sum(len(chunk) for chunk in iter(lambda: f.read(1 << 20), b""))
    return path.stat().st_size


def file_state(con, db: Path) -> dict:
    con.execute("CHECKPOINT")
    used, free, block = con.execute(
        "SELECT used_blocks, free_blocks, block_size FROM pragma_database_size() "
        "WHERE database_name = current_database()").fetchone()
    return {"file": db.stat().st_size, "used": used * block, "free": free * block}


def table_blocks(con) -> tuple[dict[str, int], int]:
    """table -> blocks of the file its persistent segments lie in (pragma_storage_info's
    block_id and additional_block_ids; no two tables shared a block in any file measured), and
    the block size."""
    block_size = con.execute("SELECT block_size FROM pragma_database_size() "
                             "WHERE database_name = current_database()").fetchone()[0]
    out = {}
    for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                               "AND NOT temporary ORDER BY table_name").fetchall():
        blocks = set()
        for block_id, extra in con.execute(
                f"SELECT block_id, additional_block_ids FROM pragma_storage_info('{name}') "
                "WHERE persistent AND block_id >= 0").fetchall():
            blocks.add(block_id)
            blocks.update(extra or [])
        out[name] = len(blocks)
    return out, block_size


def table_payload(con, work: Path) -> dict[str, tuple[int, int]]:
    """table -> (rows, bytes it adds to an empty database file with 16 KiB blocks when copied
    there alone with its own DDL): the table's data with at most a small block's padding."""
    import duckdb

    empty = work / "empty.duckdb"
    empty.unlink(missing_ok=True)
    duckdb.connect(str(empty), config={"default_block_size": "16384"}).close()
    base = empty.stat().st_size
    out = {}
    home = con.execute("SELECT current_database()").fetchone()[0]
    tables = con.execute("SELECT table_name, sql FROM duckdb_tables() WHERE database_name = current_database() "
                         "AND NOT temporary AND schema_name = 'main' ORDER BY table_name").fetchall()
    for name, ddl in tables:
        rows = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
        if rows == 0:
            continue
        target = work / f"t_{name}.duckdb"
        target.unlink(missing_ok=True)
        con.execute(f"ATTACH '{target}' AS t_copy (BLOCK_SIZE 16384)")
        con.execute("USE t_copy")
        con.execute(ddl)  # the table's own DDL: its compression settings and generated columns
        con.execute(f"USE {home}")
        columns = [c for (c,) in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = 't_copy' AND table_name = ? "
            "ORDER BY column_index", [name]).fetchall()]
        generated = ["end_us"] if name == "events" else []  # VIRTUAL (sql/schema.sql): not stored
        kept = ", ".join(f'"{c}"' for c in columns if c not in generated)
        con.execute(f'INSERT INTO t_copy."{name}" ({kept}) SELECT {kept} FROM "{name}"')
        con.execute("DETACH t_copy")
        out[name] = (rows, target.stat().st_size - base)
        target.unlink()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="*")
    parser.add_argument("--code-dir", type=Path, default=REPO_DIR)
    parser.add_argument("--min-raw-mb", type=float, default=1.0)
    args = parser.parse_args()
    use_checkout(args.code_dir)
    from ctda_sql.core.connection import connect
    from ctda_sql.engine.analyze import analyze
    from ctda_sql.ingest.load import ingest

    shared = traces_dir()
    paths = {p.name.removesuffix(".json.gz"): p for p in sorted(shared.iterdir())
             if p.name.endswith(".json.gz") or (p.is_dir() and any(p.glob("*.json*")))}
    chosen = {k: v for k, v in paths.items() if not args.targets or k in args.targets}
    summary = []
    for name, path in chosen.items():
        raw = raw_bytes(path)
        if not args.targets and raw < args.min_raw_mb * MB:
            continue
        with tempfile.TemporaryDirectory(prefix="ctda-storage-") as work_dir:
            work = Path(work_dir)
            db = work / "w.duckdb"
            con = connect(db)
            ingest(con, [path], run_name=name, show_progress=False)
            after_ingest = file_state(con, db)
            blocks_ingest, _ = table_blocks(con)
            analyze(con, show_progress=False)
            after_analyze = file_state(con, db)
            blocks_analyze, block_size = table_blocks(con)
            payload = table_payload(con, work)
            nodes = con.execute("SELECT count(*) FROM nodes").fetchone()[0]
            con.close()
        print(f"\n{name}: raw JSON {raw / MB:.2f} MB; nodes rows after analyze {nodes:,}")
        for label, state in (("after ingest", after_ingest), ("after analyze", after_analyze)):
            print(f"  {label:14s} file {state['file'] / MB:6.2f} MB ({state['file'] / raw:5.1%} of raw JSON), "
                  f"used blocks {state['used'] / MB:.2f} MB, free blocks {state['free'] / MB:.2f} MB")
        owned = sum(blocks_analyze.values())
        print(f"  {after_analyze['used'] // block_size - owned} of {after_analyze['used'] // block_size} used "
              f"blocks hold no table's segments (catalog and row-group metadata)")
        print(f"  {'table':22s} {'rows':>9s} {'blocks':>6s} {'in file MB':>10s} {'payload MB':>10s} {'B/row':>7s}")
        for table, (rows, size) in sorted(payload.items(), key=lambda kv: (-blocks_analyze[kv[0]], -kv[1][1])):
            marker = "" if blocks_ingest.get(table) else "  (analyze)"
            print(f"  {table:22s} {rows:9,d} {blocks_analyze[table]:6d} {blocks_analyze[table] * block_size / MB:10.2f} "
                  f"{size / MB:10.3f} {size / rows:7.1f}{marker}")
        summary.append((name, raw, after_ingest["file"], after_analyze["file"]))
    print("\ntrace  raw JSON MB  file after ingest MB  file after analyze MB  share after analyze")
    for name, raw, ingest_size, analyze_size in summary:
        print(f"{name}  {raw / MB:.2f}  {ingest_size / MB:.2f}  {analyze_size / MB:.2f}  {analyze_size / raw:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
