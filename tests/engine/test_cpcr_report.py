"""The cpcr report's rows: what a user reads first after analyze."""

from __future__ import annotations

from ctda_sql.engine.reports import find_report, run_report
from ctda_sql.testing.tracebuilder import TraceBuilder

from engine_helpers import analyzed


def one_rank_trace() -> TraceBuilder:
    b = TraceBuilder(rank=0)
    main = b.thread(100, "pt_main_thread")
    b.step(1, main, 0, 2_000)
    b.cpu_op(main, "aten::mm", 10, 100)
    b.launch(main, 20, 5, "gemm", stream=7, kernel_ts=30, kernel_dur=1_500)
    return b


def test_a_single_rank_run_prints_no_cross_rank_row_that_repeats_ctda(tmp_path):
    con = analyzed(one_rank_trace(), tmp_path)
    assert con.execute("SELECT count(*) FROM critical_path WHERE method = 'cross_rank'").fetchone()[0] > 0
    cursor = run_report(con, find_report("cpcr"), {})
    methods = [row[3] for row in cursor.fetchall()]
    assert methods == ["ctda", "per_thread"]
