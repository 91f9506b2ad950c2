"""Shared helpers for the benchmark scripts: trace locations, peer venvs, timing, output."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
PEER_SCRIPT = BENCH_DIR / "peer_hta.py"
PEER_VENVS = {
    "HTA 0.5.0": BENCH_DIR / ".venv-hta",
    "traceinsight 0.6.1": BENCH_DIR / ".venv-traceinsight",
}


def checkout_cli(code_dir: Path) -> list[str]:
    """The command line of the ctda-sql CLI of the checkout in code_dir (append its arguments)."""
    return [sys.executable, str(BENCH_DIR / "run_checkout.py"), str(Path(code_dir).resolve())]


def traces_dir() -> Path:
    """$CTDA_TRACES, else ../shared/traces beside the repository."""
    folder = Path(os.environ.get("CTDA_TRACES") or REPO_DIR.parent / "shared" / "traces")
    if not folder.is_dir():
        sys.exit(f"no trace folder at {folder}: set CTDA_TRACES")
    return folder


def peer_python(label: str) -> Path | None:
    """The peer venv's interpreter, or None (with a hint) when setup_peers.sh has not run."""
    python = PEER_VENVS[label] / "bin" / "python"
    if python.exists():
        return python
    print(f"[skip] {label}: no venv at {python.parent.parent} (run bench/setup_peers.sh)", file=sys.stderr)
    return None


@contextmanager
def hta_folder(files: list[Path]):
    """A temp folder of symlinks named rank-N.json[.gz]: HTA loads every trace file of a folder
    and finds each rank by searching the file for `"rank": N`, so only the name suffix matters."""
    with tempfile.TemporaryDirectory(prefix="ctda-bench-hta-") as folder:
        for index, file in enumerate(files):
            suffix = ".json.gz" if file.name.endswith(".gz") else ".json"
            (Path(folder) / f"rank-{index}{suffix}").symlink_to(file.resolve())
        yield Path(folder)


def run_peer(python: Path, trace_dir: Path, extra: list[str] = (), timeout: float = 1800) -> dict:
    """Run peer_hta.py in a peer venv; returns its JSON line (or {'error': ...})."""
    proc = subprocess.run(
        [str(python), str(PEER_SCRIPT), str(trace_dir), *extra],
        capture_output=True, text=True, timeout=timeout,
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}


def timed(fn, *args, **kwargs) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def ratio(slow: float | None, fast: float | None) -> str:
    return "-" if not slow or not fast else f"{slow / fast:.1f}x"


def print_table(headers: list[str], rows: list[list]) -> None:
    """Print the table, and keep it in the script's JSON results (write_results_json)."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]

    def line(cells) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))

    print(line(headers))
    print(line(["-" * w for w in widths]))
    for row in rows:
        print(line(row))
    _TABLES.append(results_table(headers, rows))
    write_results_json(results_json_path(), _TABLES)


# every table this run printed, in order: rewritten whole after each one, so that a benchmark
# stopped halfway keeps the tables it finished
_TABLES: list[dict] = []


def results_json_path(script: str | None = None) -> Path:
    """bench/<script>.json, beside RESULTS.md (the script: the one running, by default)."""
    return BENCH_DIR / f"{Path(script or sys.argv[0]).stem}.json"


def results_table(headers: list[str], rows: list[list]) -> dict:
    """A printed table as JSON: its headers, and each row as {header: cell}."""
    return {"headers": [str(h) for h in headers],
            "rows": [dict(zip((str(h) for h in headers), row)) for row in rows]}


def write_results_json(path: Path, tables: list[dict], argv: list[str] | None = None) -> None:
    """The run's results as JSON: its command line, when it ran (UTC) and its tables."""
    record = {"argv": sys.argv if argv is None else argv,
              "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "tables": tables}
    Path(path).write_text(json.dumps(record, indent=1, default=str) + "\n")
