"""Runs inside a peer venv (HTA or traceinsight): times TraceAnalysis load, and optionally
critical_path_analysis of one step, of one trace folder; prints one JSON object.

Usage: peer_hta.py TRACE_DIR [--critical-path RANK ANNOTATION INSTANCE] [--no-mp]
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
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
