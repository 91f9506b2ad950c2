"""A step whose cross-rank path hops more than 10,000 times is followed to its start: the
recursion that walks the gates once stopped at hop 10,000 and left the rest of the step off
the path (issue 32's growth shapes hop at every collective)."""

from __future__ import annotations

from ctda_sql.core.connection import connect
from ctda_sql.engine.analyze import analyze
from ctda_sql.ingest.load import ingest
from ctda_sql.testing.tracebuilder import TraceBuilder

CALLS = 10_200
WORLD = 2


def turn_taking_rank(rank: int) -> TraceBuilder:
    """One step of CALLS gloo all-reduces 100 us apart; the ranks take turns to arrive 60 us
    late (call i: rank i mod 2), so every call gates the path and the path changes rank at
    each one."""
    builder = TraceBuilder(rank=rank, world_size=WORLD)
    builder.pid = 1000 + rank
    main, worker = builder.thread(100, "pt_main_thread"), builder.thread(500, "gloo worker")
    builder.step(1, main, ts=0, dur=CALLS * 100)
    meta = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
            "Process Group Name": "0", "Process Group Ranks": str(list(range(WORLD))), "Group size": WORLD}
    for call in range(CALLS):
        start = 5 + call * 100 + (60 if call % WORLD == rank else 0)
        end = 5 + call * 100 + 72  # 12 us after the late rank's arrival
        builder.cpu_op(main, "c10d::allreduce_", ts=start, dur=5,
                       **{"Input Dims": [[[1024]]], "Input type": ["TensorList"]})
        builder.cpu_op(main, "record_param_comms", ts=start + 1, dur=3, **meta)
        builder.annotation(worker, "gloo:all_reduce", ts=start + 2, dur=end - start - 2,
                           **{"Input Dims": [[1024]], "Input type": ["float"]})
        builder.cpu_op(main, "aten::add_", ts=end + 1, dur=4)
    return builder


def test_a_path_of_more_than_ten_thousand_hops_reaches_the_step_start(tmp_path):
    paths = [turn_taking_rank(rank).write(tmp_path / f"rank-{rank}.json") for rank in range(WORLD)]
    con = connect(tmp_path / "long.duckdb")
    ingest(con, paths, run_name="long", show_progress=False)
    analyze(con, method=["ctda", "cross_rank"], show_progress=False)
    hops, ranks, earliest = con.execute(
        "SELECT count(*), count(DISTINCT rank), min(from_us) FROM cross_rank_segments WHERE step = 1").fetchone()
    assert hops > 10_000 and ranks == WORLD
    assert earliest < 100  # the first call's time, not hop 10,000's ~100 ms later
    con.close()
