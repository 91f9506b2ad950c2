"""A step whose cross-rank path hops more than 10,000 times is followed to its start: the
recursion that walks the gates once stopped at hop 10,000 and left the rest of the step off
the path (issue 32's growth shapes hop at every collective)."""

from __future__ import annotations

from ctda_sql.core.connection import connect
from ctda_sql.engine.analyze import analyze
from ctda_sql.ingest.load import ingest

from helpers.jobs import turn_taking_rank

CALLS = 10_200
WORLD = 2


def test_a_path_of_more_than_ten_thousand_hops_reaches_the_step_start(tmp_path):
    paths = [turn_taking_rank(rank, CALLS).write(tmp_path / f"rank-{rank}.json") for rank in range(WORLD)]
    con = connect(tmp_path / "long.duckdb")
    ingest(con, paths, run_name="long", show_progress=False)
    analyze(con, method=["ctda", "cross_rank"], show_progress=False)
    hops, ranks, earliest = con.execute(
        "SELECT count(*), count(DISTINCT rank), min(from_us) FROM cross_rank_segments WHERE step = 1").fetchone()
    assert hops > 10_000 and ranks == WORLD
    assert earliest < 100  # the first call's time, not hop 10,000's ~100 ms later
    con.close()
