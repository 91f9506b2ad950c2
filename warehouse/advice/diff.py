"""Why one run's step differs from another's, along their critical paths (`ctda-sql diff`).

The rows come from the saved report `path_diff` (queries/path_diff.sql), the one definition of
the decomposition: this module runs the bundled file, so the report and the JSON document
always agree. The document (docs: DESIGN.md, "Advice and path diff"):

    {"run_a", "run_b", "step_a_us", "step_b_us", "delta_us",
     "rows": [{"kind", "label", "a_us", "b_us", "delta_us"}, ...], "unexplained_us"}

Every value is whole microseconds, so sum(rows.delta_us) + unexplained_us == delta_us exactly.
"""

from __future__ import annotations

from ctda_sql.core import sqlfiles
from ctda_sql.core.errors import CtdaError
from ctda_sql.engine.reports import Report, parse_report, run_report

REPORT_FILE = "path_diff.sql"
# the report's closing rows, which the document carries as fields of its own
REMAINDER_KIND = "unexplained"
STEP_KIND = "step"


def path_diff_report() -> Report:
    """The bundled report (never one shadowing it from $CTDA_REPORTS)."""
    text = sqlfiles.load(REPORT_FILE, package="ctda_sql.queries")
    return parse_report(text, f"queries/{REPORT_FILE}", "path_diff")


def diff(con, run_a: str, run_b: str, rank: int | None = None) -> dict:
    """The path diff of run_b against run_a (their median steps; one rank's with `rank`)."""
    if not run_a or not run_b:
        raise CtdaError("diff needs two runs (run_a and run_b)")
    given = {"run_a": run_a, "run_b": run_b, "rank": rank}
    cursor = run_report(con, path_diff_report(), given)
    records = [dict(zip(("kind", "label", "a_us", "b_us", "delta_us"), row)) for row in cursor.fetchall()]
    return _document(run_a, run_b, records)


def _document(run_a: str, run_b: str, records: list[dict]) -> dict:
    by_kind = {r["kind"]: r for r in records if r["kind"] in (REMAINDER_KIND, STEP_KIND)}
    step = by_kind.get(STEP_KIND)
    if step is None or step["a_us"] is None or step["b_us"] is None:
        missing = run_a if step is None or step["a_us"] is None else run_b
        raise CtdaError(f"run {missing!r} has no analysed steps to compare")
    rows = [r for r in records if r["kind"] not in by_kind]
    return {"run_a": run_a, "run_b": run_b,
            "step_a_us": step["a_us"], "step_b_us": step["b_us"], "delta_us": step["delta_us"],
            "rows": rows, "unexplained_us": by_kind[REMAINDER_KIND]["delta_us"]}
