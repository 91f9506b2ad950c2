"""`ctda-sql export overlay`: a run's trace with its critical path marked, for Perfetto UI and
chrome://tracing. HTA's convention: every input event is copied from its trace file as it
stands (name, ph, ts, dur, pid, tid and args unchanged, ts in the file's own time base), so
the overlay lines up with the trace and with HTA's overlay of it; what the overlay adds (the
args.critical marks, the path processes, the flows) goes beside. The events are put together
by sql/export/overlay_events.sql; this module reads each file's event objects verbatim (as
the view overlay_input), adds the file's top-level keys and streams the rows out (gzip when
the name ends .gz)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import msgspec
import pyarrow as pa
from isal import igzip

from ctda_sql.core import sqlfiles
from ctda_sql.core.errors import CtdaError
from ctda_sql.engine.analyze import METHODS
from ctda_sql.export.outputfile import atomic_output, check_output_path
from ctda_sql.ingest import traceio

OVERLAY_SUFFIXES = (".json", ".json.gz")
_BATCH_ROWS = 50_000
# the read buffer is twice this, per thread; Kineto events are a few hundred bytes
_LARGEST_EVENT_BYTES = 64 << 20


def write_overlay(con: duckdb.DuckDBPyConnection, path: Path, run: str, rank: int | None,
                  methods: list[str]) -> dict:
    """Write the overlay of `run` (one rank, or all ranks when rank is None) to `path`;
    the first method marks events and draws flows, each method gets its own path process.
    The output is checked first (outputfile.check_output_path) and written whole or not at
    all. Returns counts:
    events (copied from the input), added (marks are not counted; slices and flows are)."""
    if not path.name.endswith(OVERLAY_SUFFIXES):
        raise CtdaError(f"{path}: the overlay file name must end in .json or .json.gz")
    check_output_path(con, path)
    run_id, ranks = _run_and_ranks(con, run, rank)
    methods = _analysed_methods(con, run, run_id, ranks, _checked_methods(methods))
    remap = rank is None and len(ranks) > 1
    params = {"run_id": run_id, "rank": rank, "methods": methods, "primary": methods[0], "remap": remap}
    pids = _overlay_pids(con, run_id, ranks if remap else [])
    header = _top_level(con, run, run_id, ranks, methods, pids)
    inputs = _input_events(con, run_id, ranks)
    con.register("overlay_input", inputs)
    con.register("overlay_pids", pids)
    *steps, (query, names) = sqlfiles.parameterized_statements(sqlfiles.load("export/overlay_events.sql"))
    try:
        for statement, used in steps:  # the named steps: private temp tables the query reads
            con.execute(statement, {key: params[key] for key in used})
        reader = con.sql(query, params={key: params[key] for key in names}).to_arrow_reader(_BATCH_ROWS)
        try:
            written = _write_json(path, header, reader)
        finally:
            reader.close()  # the query's result holds the connection until closed
    finally:
        sqlfiles.execute(con, "export/overlay_drop.sql")
        con.unregister("overlay_input")
        con.unregister("overlay_pids")
    return {"path": str(path), "run": run, "ranks": ranks, "methods": methods,
            "events": inputs.num_rows, "added": written - inputs.num_rows}


def _overlay_pids(con, run_id: int, ranks: list[int]) -> pa.Table:
    """The pid each (rank, pid) of a multi-rank overlay takes (sql/export/overlay_pids.sql);
    no rows for one rank, whose pids stay as they are."""
    return con.sql(sqlfiles.load("export/overlay_pids.sql"), params={"run_id": run_id, "ranks": ranks}).to_arrow_table()


def _input_events(con, run_id: int, ranks: list[int]) -> pa.Table:
    """The event objects of each rank's trace file, verbatim: (rank, event_id, json), where
    event_id is the position in the file's traceEvents, as ingest numbers them. Refuses a
    file that is gone or changed since it was ingested. The files are read by a DuckDB of
    its own: the warehouse's connection may be locked out of files (--safe)."""
    sources = con.execute("SELECT rank, source_path, file_sha256, event_count FROM traces "
                          "WHERE run_id = ? AND list_contains(?, rank) ORDER BY rank", [run_id, ranks]).fetchall()
    tables = []
    with duckdb.connect() as reader, traceio.parse_folder() as folder:
        for rank, source, sha256, stored in sources:
            events_file = Path(folder) / f"rank-{rank}.json"
            events_file.write_bytes(_events_array(Path(source), sha256))
            table = reader.sql(
                "SELECT CAST(? AS INTEGER) AS rank, row_number() OVER () - 1 AS event_id, json::VARCHAR AS json "
                "FROM read_json_objects(?, format = 'array', maximum_object_size = ?)",
                params=[rank, str(events_file), _LARGEST_EVENT_BYTES]).to_arrow_table()
            events_file.unlink()
            if table.num_rows != stored:
                raise CtdaError(f"{source}: holds {table.num_rows:,} events where {stored:,} were ingested; "
                                "ingest it again (ingest --replace)")
            tables.append(table)
    return pa.concat_tables(tables)


def _events_array(source: Path, sha256: str) -> bytes:
    """The text of the traceEvents array of `source`, once its bytes are the ingested ones."""
    again = "the overlay copies its events from the trace files; give it back or ingest it again"
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise CtdaError(f"{source}: cannot read the trace file this run was ingested from "
                        f"({exc.strerror or exc}); {again}") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise CtdaError(f"{source}: the trace file changed since it was ingested; {again}")
    text = traceio.decompress(source, data)
    return bytes(msgspec.json.decode(text, type=dict[str, msgspec.Raw])["traceEvents"])


def _checked_methods(methods: list[str]) -> list[str]:
    chosen = list(dict.fromkeys(m for name in methods for m in (METHODS if name == "all" else [name])))
    unknown = [m for m in chosen if m not in METHODS]
    if unknown or not chosen:
        raise CtdaError(f"unknown method {(unknown or [''])[0]!r}; choose ctda, per_thread, cross_rank or all")
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


def _analysed_methods(con, run: str, run_id: int, ranks: list[int], methods: list[str]) -> list[str]:
    """The methods with a path on these ranks; `all` skips those without one (cross_rank on a
    single-rank run), a method asked for by name must have one."""
    found = {row[0] for row in con.execute(
        "SELECT DISTINCT method FROM critical_path WHERE run_id = ? AND list_contains(?, coalesce(node_rank, rank))",
        [run_id, ranks]).fetchall()}
    missing = [m for m in methods if m not in found]
    if missing and (len(methods) < len(METHODS) or set(missing) != {"cross_rank"}):
        raise CtdaError(f"run {run!r} has no {', '.join(sorted(missing))} critical path yet; "
                        f"run `ctda-sql analyze --run {run}` first")
    return [m for m in methods if m in found]


def _top_level(con, run: str, run_id: int, ranks: list[int], methods: list[str], pids: pa.Table) -> dict:
    """The first rank's top-level keys (distributedInfo, deviceProperties ...), and ours; a
    multi-rank overlay states the pid each rank's processes take (ctdaOverlay.pids)."""
    info, devices, schema, name, metadata = con.execute(
        "SELECT distributed_info, device_properties, schema_version, trace_name, metadata "
        "FROM traces WHERE run_id = ? AND rank = ?", [run_id, ranks[0]]).fetchall()[0]
    header = json.loads(metadata or "{}")
    for key, value in (("schemaVersion", _schema_version(schema)), ("traceName", name),
                       ("distributedInfo", _json(info)), ("deviceProperties", _json(devices))):
        if value is not None:
            header[key] = value
    header["ctdaOverlay"] = {
        "run": run, "ranks": ranks, "methods": methods,
        "critical": f"args.critical = 1 and critical_path flows follow the {methods[0]} path",
        "time_base": "each rank's events keep the ts of its trace file; the path slices and "
                     "flows are placed in the time base of the rank they mark",
        "input_events": "copied unchanged from the trace files, but for args.critical"
                        + (" and flow ids, moved by rank * 10^k so ranks' flows stay apart"
                           if len(ranks) > 1 else ""),
    }
    if pids.num_rows:
        header["ctdaOverlay"]["input_events"] += (
            "; each rank's pids move to a pid of its own (pid_rule, pids), so no track holds two "
            "ranks' events, and process names become 'rank R · GPU d (name)' or 'rank R · pid P (name)'")
        header["ctdaOverlay"]["pid_rule"] = pids.column("rule")[0].as_py()
        header["ctdaOverlay"]["pids"] = [
            {"rank": row["rank"], "pid": _json_pid(row["pid"]),
             "overlay_pid": row["overlay_pid"] if row["overlay_pid"] is not None else row["overlay_text"],
             "track": row["track"]}
            for row in pids.select(["rank", "pid", "overlay_pid", "overlay_text", "track"]).to_pylist()]
    return header


def _json_pid(text: str):
    """A pid as the events table holds it (text), as a number when it is one."""
    return int(text) if text.lstrip("-").isdigit() else text


def _schema_version(text: str | None):
    return int(text) if text is not None and text.isdigit() else text


def _json(text: str | None):
    return None if text is None else json.loads(text)


def _write_json(path: Path, header: dict, batches) -> int:
    """{header keys..., "traceEvents": [rows...]}; returns the number of events written.
    Written beside `path` and renamed over it: a failed write leaves what was there."""
    with atomic_output(path) as temporary:
        if path.name.endswith(".gz"):
            with igzip.open(temporary, "wt", encoding="utf-8") as out:
                return _write_events(out, header, batches)
        with open(temporary, "w", encoding="utf-8") as out:
            return _write_events(out, header, batches)


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
