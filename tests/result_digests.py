"""A digest of every result table, per run: what tests/engine/test_result_golden.py compares with the
digests kept in tests/data/result_digests.json, so that a change meant only to be faster
(issue 32) cannot change one row of a critical path, a node, an edge or a what-if replay
unnoticed.

A table's digest for a run is the md5 of its rows as text, sorted, without run_id (the digest
of a run must not depend on which runs share its warehouse). DOUBLE values are rounded to 9
significant digits: sums of floats differ in their last bits from one run of the same code to
the next (DuckDB's threads add in any order), never in the ninth.
"""

from __future__ import annotations

from pathlib import Path

from ctda_sql.engine.analyze import analyze
from ctda_sql.ingest.load import ingest
from ctda_sql.whatif.replay import whatif

TABLES = ("analysis_windows", "nodes", "edges", "critical_path", "path_events",
          "collective_instances", "cross_rank_segments", "whatif_steps", "whatif_path")
DATA = Path(__file__).parent / "data"
RECORDED = ("cuda", "cuda/parallel", "gloo", "gloo_pairs", "shaped", "whatif")
SIGNIFICANT_DIGITS = 9


def recorded_inputs() -> dict[str, Path]:
    """tests/data's recordings: each trace file, or each folder of rank files, by a name."""
    found = {}
    for folder in RECORDED:
        base = DATA / folder
        if not base.is_dir():
            continue
        for path in sorted(base.iterdir()):
            if f"{folder}/{path.name}" in RECORDED:
                continue  # listed as a folder of its own inputs
            if path.name.endswith(".json.gz") or (path.is_dir() and any(path.glob("*.json*"))):
                found[f"{folder}/{path.name.removesuffix('.json.gz')}"] = path
    return found


def shared_inputs(traces: Path) -> dict[str, Path]:
    """The shared traces: each file, and each folder of rank files."""
    return {f"shared/{path.name.removesuffix('.json.gz')}": path for path in sorted(traces.iterdir())
            if path.name.endswith(".json.gz") or (path.is_dir() and any(path.glob("*.json*")))}


def load_and_replay(con, inputs: dict[str, Path]) -> None:
    """Each input as a run of its own, analysed with every method and replayed unchanged."""
    for name, path in inputs.items():
        ingest(con, [path], run_name=name, show_progress=False)
    analyze(con, method="all", show_progress=False)
    whatif(con, name="unchanged", top=0)


def _row_text(con, table: str) -> str:
    """One VARCHAR per row: every column but run_id, DOUBLEs rounded, NULL spelled out."""
    columns = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name = ? AND column_name <> 'run_id' "
        "ORDER BY ordinal_position", [table]).fetchall()
    parts = []
    for name, data_type in columns:
        quoted = '"' + name.replace('"', '""') + '"'
        if data_type == "DOUBLE":
            value = (f"CASE WHEN {quoted} = 0 OR NOT isfinite({quoted}) THEN {quoted} ELSE round({quoted}, "
                     f"{SIGNIFICANT_DIGITS - 1} - floor(log10(abs({quoted})))::INT) END")
        else:
            value = quoted
        parts.append(f"coalesce(CAST({value} AS VARCHAR), '<null>')")
    return " || '|' || ".join(parts)


def digests(con) -> dict[str, dict[str, str]]:
    """{run name: {table: 'rows:md5'}} for every run and result table (empty ones included)."""
    result: dict[str, dict[str, str]] = {name: {} for (name,) in con.execute("SELECT name FROM runs").fetchall()}
    for table in TABLES:
        rows = con.execute(
            f"SELECT r.name, count(t.run_id), md5(coalesce(string_agg(t.row_text, chr(10) ORDER BY t.row_text), '')) "
            f"FROM runs r LEFT JOIN (SELECT run_id, {_row_text(con, table)} AS row_text FROM {table}) t "
            f"USING (run_id) GROUP BY r.name").fetchall()
        for name, count, digest in rows:
            result[name][table] = f"{count}:{digest}"
    return result
