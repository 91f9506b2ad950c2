"""`ctda-sql export overlay`: a run's trace with its critical path marked, for Perfetto UI and
chrome://tracing. The events are rebuilt by sql/export/overlay_events.sql; this module only
adds the file's top-level keys and streams the rows out (gzip when the name ends in .gz)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from isal import igzip

from . import sqlfiles
from .analyze import METHODS
from .errors import CtdaError

OVERLAY_SUFFIXES = (".json", ".json.gz")
_BATCH_ROWS = 50_000
# top-level keys that describe the original time base, which the overlay does not use
_DROPPED_KEYS = ("baseTimeNanoseconds",)


def write_overlay(con: duckdb.DuckDBPyConnection, path: Path, run: str, rank: int | None,
                  methods: list[str]) -> dict:
    """Write the overlay of `run` (one rank, or all ranks when rank is None) to `path`;
    the first method marks events and draws flows, each method gets its own path process.
    Returns counts: events (original), added, path_nodes, flows."""
    _check_output(path)
    methods = _checked_methods(methods)
    run_id, ranks = _run_and_ranks(con, run, rank)
    _require_analysis(con, run, run_id, ranks, methods)
    params = {"run_id": run_id, "rank": rank, "methods": methods, "primary": methods[0],
              "remap": rank is None and len(ranks) > 1}
    header = _top_level(con, run, run_id, ranks, methods)
    original = con.execute("SELECT count(*) FROM events WHERE run_id = ? AND list_contains(?, rank)",
                           [run_id, ranks]).fetchall()[0][0]
    events = con.sql(sqlfiles.load("export/overlay_events.sql"), params=params)
    written = _write_json(path, header, events.to_arrow_reader(_BATCH_ROWS))
    return {"path": str(path), "run": run, "ranks": ranks, "methods": methods,
            "events": original, "added": written - original}


def _check_output(path: Path) -> None:
    if not path.name.endswith(OVERLAY_SUFFIXES):
        raise CtdaError(f"{path}: the overlay file name must end in .json or .json.gz")
    if not path.parent.is_dir():
        raise CtdaError(f"{path.parent}: no such folder")


def _checked_methods(methods: list[str]) -> list[str]:
    chosen = list(dict.fromkeys(m for name in methods for m in (METHODS if name == "all" else [name])))
    unknown = [m for m in chosen if m not in METHODS]
    if unknown or not chosen:
        raise CtdaError(f"unknown method {(unknown or [''])[0]!r}; choose ctda, per_thread or all")
    return chosen


def _run_and_ranks(con, run: str, rank: int | None) -> tuple[int, list[int]]:
    row = next(iter(con.execute("SELECT run_id FROM runs WHERE name = ?", [run]).fetchall()), None)
    if row is None:
        names = [r[0] for r in con.execute("SELECT name FROM runs ORDER BY name").fetchall()]
        raise CtdaError(f"no run named {run!r}; runs: {', '.join(names) or 'none (ingest first)'}")
    ranks = [r[0] for r in con.execute(
        "SELECT rank FROM traces WHERE run_id = ? AND (? IS NULL OR rank = ?) ORDER BY rank",
        [row[0], rank, rank]).fetchall()]
    if not ranks:
        held = [r[0] for r in con.execute("SELECT rank FROM traces WHERE run_id = ? ORDER BY rank",
                                          [row[0]]).fetchall()]
        raise CtdaError(f"run {run!r} has no rank {rank}; ranks: {', '.join(map(str, held))}")
    return row[0], ranks


def _require_analysis(con, run: str, run_id: int, ranks: list[int], methods: list[str]) -> None:
    missing = con.execute(
        "SELECT list(m ORDER BY m) FROM unnest(?::VARCHAR[]) AS t(m) WHERE m NOT IN "
        "(SELECT method FROM critical_path WHERE run_id = ? AND list_contains(?, rank))",
        [methods, run_id, ranks]).fetchall()[0][0]
    if missing:
        raise CtdaError(f"run {run!r} has no {', '.join(missing)} critical path yet; "
                        f"run `ctda-sql analyze --run {run}` first")


def _top_level(con, run: str, run_id: int, ranks: list[int], methods: list[str]) -> dict:
    """The first rank's top-level keys (distributedInfo, deviceProperties ...), and ours."""
    info, devices, schema, name, metadata, origin = con.execute(
        "SELECT t.distributed_info, t.device_properties, t.schema_version, t.trace_name, t.metadata, "
        "r.origin_ts::VARCHAR FROM traces t JOIN runs r USING (run_id) WHERE run_id = ? AND rank = ?",
        [run_id, ranks[0]]).fetchall()[0]
    header = {key: value for key, value in json.loads(metadata or "{}").items() if key not in _DROPPED_KEYS}
    for key, value in (("schemaVersion", _schema_version(schema)), ("traceName", name),
                       ("distributedInfo", _json(info)), ("deviceProperties", _json(devices))):
        if value is not None:
            header[key] = value
    header["ctdaOverlay"] = {
        "run": run, "ranks": ranks, "methods": methods,
        "critical": f"args.critical = 1 and critical_path flows follow the {methods[0]} path",
        "time_base": "microseconds since the run's origin (origin_epoch_us)",
        "origin_epoch_us": origin,
    }
    return header


def _schema_version(text: str | None):
    return int(text) if text is not None and text.isdigit() else text


def _json(text: str | None):
    return None if text is None else json.loads(text)


def _write_json(path: Path, header: dict, batches) -> int:
    """{header keys..., "traceEvents": [rows...]}; returns the number of events written."""
    opener = igzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "wt", encoding="utf-8") as out:
            return _write_events(out, header, batches)
    except BaseException:
        path.unlink(missing_ok=True)  # no half-written trace left behind
        raise


def _write_events(out, header: dict, batches) -> int:
    out.write("{\n")
    for key, value in header.items():
        out.write(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},\n")
    out.write('"traceEvents": [\n')
    count = 0
    for batch in batches:
        rows = batch.column(0).to_pylist()
        if rows:
            out.write((",\n" if count else "") + ",\n".join(rows))
            count += len(rows)
    out.write("\n]}\n")
    return count
