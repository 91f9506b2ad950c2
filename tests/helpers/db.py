"""Analysed warehouses and their rows as dicts."""

from __future__ import annotations

from pathlib import Path

from ctda_sql.core.connection import connect
from ctda_sql.engine.analyze import analyze
from ctda_sql.engine.reports import find_report, run_report
from ctda_sql.ingest.load import ingest


def rows(con, sql: str, params=None) -> list[dict]:
    result = con.execute(sql, params or [])
    names = [d[0] for d in result.description]
    return [dict(zip(names, row)) for row in result.fetchall()]


def report(con, name: str, **params) -> list[dict]:
    result = run_report(con, find_report(name), {k: str(v) for k, v in params.items()})
    names = [d[0] for d in result.description]
    return [dict(zip(names, row)) for row in result.fetchall()]


def analysed_db(path: Path, runs: dict[str, list[Path]], meta: dict[str, dict] | None = None):
    con = connect(path)
    for name, paths in runs.items():
        ingest(con, paths, run_name=name, meta=(meta or {}).get(name), show_progress=False)
    analyze(con, show_progress=False)
    return con
