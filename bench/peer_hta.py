"""Runs inside a peer venv (HTA or traceinsight): times TraceAnalysis load, and optionally
critical_path_analysis of one step, of one trace folder; prints one JSON object.

Usage: peer_hta.py TRACE_DIR [--critical-path RANK ANNOTATION INSTANCE] [--every-step RANK ANNOTATION]
  --every-step   critical_path_analysis of instance 0, 1, ... of ANNOTATION until one fails
                 (past the last step): the path of every step, as `ctda-sql analyze` gives
Kept free of ctda-sql imports: the peer venvs do not have it installed.
"""

from __future__ import annotations

import json
import logging
import sys
import time


def _quiet_logs() -> None:
    # HTA logs every file and step at INFO; the benchmark only wants the JSON line.
    logging.disable(logging.WARNING)


def _trace_analysis_class():
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:  # traceinsight ships the HTA API under its own name
        from traceinsight.trace_analysis import TraceAnalysis  # type: ignore
    return TraceAnalysis


def _version() -> str:
    from importlib import metadata

    for dist in ("HolisticTraceAnalysis", "traceinsight"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def main(argv: list[str]) -> int:
    _quiet_logs()
    trace_dir = argv[0]
    TraceAnalysis = _trace_analysis_class()
    result: dict = {"tool": _version()}
    start = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=trace_dir)
    result["load_s"] = time.perf_counter() - start
    if "--critical-path" in argv:
        at = argv.index("--critical-path")
        rank, annotation, instance = int(argv[at + 1]), argv[at + 2], int(argv[at + 3])
        start = time.perf_counter()
        _graph, ok = analysis.critical_path_analysis(rank, annotation, instance)
        result["critical_path_s"] = time.perf_counter() - start
        result["critical_path_ok"] = bool(ok)
    if "--every-step" in argv:
        at = argv.index("--every-step")
        rank, annotation = int(argv[at + 1]), argv[at + 2]
        start = time.perf_counter()
        result["steps"] = _every_step(analysis, rank, annotation)
        result["every_step_s"] = time.perf_counter() - start
    print(json.dumps(result))
    return 0


def _every_step(analysis, rank: int, annotation: str, most: int = 10_000) -> int:
    """How many steps' paths HTA built, asking for instance 0, 1, ... until one fails."""
    for instance in range(most):
        try:
            _graph, ok = analysis.critical_path_analysis(rank, annotation, instance)
        except Exception:  # HTA raises or returns False past the last instance
            return instance
        if not ok:
            return instance
    return most


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
