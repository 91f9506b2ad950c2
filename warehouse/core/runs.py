"""Runs by name: the one lookup every command uses to turn `--run NAME` into a run_id."""

from __future__ import annotations

from ctda_sql.core.errors import CtdaError


def run_names(con) -> list[str]:
    return [row[0] for row in con.execute("SELECT name FROM runs ORDER BY name").fetchall()]


def run_id_of(con, run: str | None) -> tuple[int, str]:
    """(run_id, name) of the run named `run`; with no name, the warehouse's only run. A name
    that does not exist, or no name where several runs exist, is a CtdaError naming the runs."""
    if run is None:
        rows = con.execute("SELECT run_id, name FROM runs ORDER BY name").fetchall()
        if len(rows) == 1:
            return rows[0]
        if not rows:
            raise CtdaError("the warehouse has no runs; ingest a trace first (ctda-sql ingest PATH)")
        raise CtdaError(f"the warehouse has {len(rows)} runs: give --run NAME; runs: "
                        f"{', '.join(name for _, name in rows)}")
    row = con.execute("SELECT run_id, name FROM runs WHERE name = ?", [run]).fetchone()
    if row is None:
        raise CtdaError(f"no run named {run!r}; runs: {', '.join(run_names(con)) or 'none (ingest first)'}")
    return row
