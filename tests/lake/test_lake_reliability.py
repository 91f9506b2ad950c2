"""The lake's commands under a bad cluster option and under Ctrl-C (issue 35 items 11, 12, 15
and the refused port's wait): one line, a non-zero exit, no traceback, and a Ctrl-C that says
truthfully what the lake kept."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ctda_sql.api import Warehouse
from ctda_sql.core.errors import CtdaError
from ctda_sql.lake import cluster as lake_cluster
from ctda_sql.lake import store as lake_store
from ctda_sql.lake.workers import MAX_WORKERS_PER_CORE, max_workers

from helpers.cli import console_script
from helpers.traces import busy_trace

pytest.importorskip("distributed")

GLOO = Path(__file__).parents[1] / "data" / "gloo" / "straggler"


def ctda(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([console_script(), *args], capture_output=True, text=True, timeout=timeout)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


# ---- --workers: a bound (item 12) --------------------------------------------------------------

@pytest.mark.parametrize("command", ["ingest", "analyze"])
@pytest.mark.parametrize("workers", ["10000", "0"])
def test_too_many_or_no_workers_is_one_error_line_before_anything_starts(tmp_path, command, workers):
    lake = tmp_path / "lake"
    args = [command, str(GLOO)] if command == "ingest" else [command]
    line = one_error_line(ctda(*args, "--lake", str(lake), "--workers", workers))
    assert f"--workers must be from 1 to {max_workers()}" in line and f"got {workers}" in line
    assert not lake.exists()  # refused before the lake or a cluster was touched


def test_the_workers_help_states_the_bound():
    done = ctda("ingest", "--help")
    assert done.returncode == 0
    assert f"{MAX_WORKERS_PER_CORE} per core ({max_workers()} here" in " ".join(done.stdout.split())


@pytest.mark.parametrize("workers", [10**20, max_workers() + 1, 2.5])
def test_the_python_api_refuses_an_absurd_worker_count(tmp_path, workers):
    with pytest.raises(CtdaError, match="workers must be"):
        Warehouse(lake=tmp_path / "lake", workers=workers).ingest(GLOO)
    assert not (tmp_path / "lake").exists()


# ---- --scheduler: whatever answers, one line (item 11 and the refused port) --------------------

@pytest.fixture
def server():
    """A TCP server on 127.0.0.1 that accepts and sends `payload` (nothing: it stays silent);
    returns its port."""
    sockets: list[socket.socket] = []

    def start(payload: bytes) -> int:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        sockets.append(listener)

        def serve() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                sockets.append(conn)
                if payload:
                    try:
                        conn.sendall(payload)
                    except OSError:
                        pass

        threading.Thread(target=serve, daemon=True).start()
        return listener.getsockname()[1]

    yield start
    for sock in sockets:
        sock.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


GARBAGE = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 4


@pytest.mark.parametrize("address, message", [
    ("tcp://127.0.0.1:REFUSED", "cannot reach the Dask scheduler at tcp://127.0.0.1:{port}: Connection refused"),
    ("tcp://127.0.0.1:GARBAGE", "what it sent is not Dask's protocol"),  # was a 3 EiB allocation traceback
    ("tls://127.0.0.1:GARBAGE", "as a Dask scheduler: TLS expects"),  # was a traceback
    ("inproc://somewhere", "lives in another process's memory"),  # was a traceback
])
def test_a_scheduler_that_is_none_is_one_error_line_at_once(tmp_path, server, address, message):
    port = _closed_port() if "REFUSED" in address else server(GARBAGE)
    address = address.replace("REFUSED", str(port)).replace("GARBAGE", str(port))
    started = time.monotonic()
    line = one_error_line(ctda("ingest", str(GLOO), "--lake", str(tmp_path / "lake"), "--scheduler", address))
    assert message.format(port=port) in line
    assert time.monotonic() - started < 15  # a refused port waited the 20 s connect timeout
    assert not (tmp_path / "lake").exists()


def test_a_port_that_accepts_and_stays_silent_times_out_in_one_line(run_cli, tmp_path, server, monkeypatch):
    monkeypatch.setattr(lake_cluster, "SCHEDULER_TIMEOUT_S", 1.0)  # 20 s in use
    address = f"tcp://127.0.0.1:{server(b'')}"
    started, outcome = time.monotonic(), {}
    command = threading.Thread(target=lambda: outcome.update(result=run_cli(
        "ingest", str(GLOO), "--lake", str(tmp_path / "lake"), "--scheduler", address)), daemon=True)
    command.start()
    command.join(15)
    assert "result" in outcome, "it hangs"  # it did, forever
    result = outcome["result"]
    assert result.code == 1
    assert result.err.strip() == f"error: no Dask scheduler answered at {address} within 1 s " \
                                 "(is it a `dask scheduler` port?)"
    assert time.monotonic() - started < 10
    assert not (tmp_path / "lake").exists()


# ---- Ctrl-C (item 15) --------------------------------------------------------------------------

def _rank_trace(path: Path, rank: int) -> Path:
    """test_interrupts' busy trace (~12k events) as rank `rank` of 4: a rank's write and its
    analysis take a few tenths of a second."""
    trace = json.loads(busy_trace(path, steps=20, ops=300).read_text())
    trace["distributedInfo"] = {"rank": rank, "world_size": 4}
    path.write_text(json.dumps(trace))
    return path


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("job")
    for rank in range(4):
        _rank_trace(folder / f"rank{rank}.json", rank)
    return folder


def _ctrl_c_when(args: list[str], ready, timeout: float = 90) -> subprocess.CompletedProcess:
    """Run ctda-sql ARGS in its own process group and Ctrl-C the whole group, as a terminal
    does (the Dask workers too), as soon as ready() holds; then wait for every process of the
    group to be gone."""
    process = subprocess.Popen([console_script(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    deadline = time.monotonic() + timeout
    while not ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert process.poll() is None, process.communicate()
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # no worker outlives the command
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail("a process of the interrupted command was still running 10 s after it exited")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def interrupted_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stdout + done.stderr  # the workers printed theirs
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted"), done.stderr
    return lines[0]


def _ranks_with(lake: Path, table: str) -> list[int]:
    folder = lake / table / "run=job"
    return sorted(int(p.parent.name.removeprefix("rank=")) for p in folder.glob("rank=*/part-0.parquet"))


def _names(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def test_ctrl_c_before_anything_is_written_leaves_no_lake_and_says_so(tmp_path, job):
    lake = tmp_path / "lake"
    # while the workers start or the files are parsed: the lake folder exists, no rank is in
    done = _ctrl_c_when(["ingest", "-q", str(job), "--lake", str(lake), "--run", "job", "--workers", "1"],
                        lambda: (lake / lake_store.WRITER_LOCK).exists())
    assert interrupted_line(done) == "interrupted; the lake is unchanged"  # it said "the database"
    assert not lake.exists()


def test_ctrl_c_during_the_writes_names_the_ranks_kept_and_a_rerun_loads_the_rest(tmp_path, job):
    lake = tmp_path / "lake"
    ingest = ["ingest", "-q", str(job), "--lake", str(lake), "--run", "job", "--workers", "1"]
    # one worker writes the ranks one after another: Ctrl-C once the first is published
    done = _ctrl_c_when(ingest, lambda: bool(_ranks_with(lake, "traces")))
    kept = _ranks_with(lake, "traces")
    assert 1 <= len(kept) < 4, kept  # the workers were stopped: no rank was published after the line
    were = "were loaded and are" if len(kept) > 1 else "was loaded and is"
    assert interrupted_line(done) == (f"interrupted; {_names(kept)} of run 'job' {were} kept; "
                                      "run the same command again to finish (it skips what is loaded)")
    # it said "the database is unchanged"
    again = ctda(*ingest)
    assert again.returncode == 0, again.stderr
    assert f"run 'job': {4 - len(kept)} loaded, {len(kept)} skipped" in again.stdout
    assert _ranks_with(lake, "traces") == [0, 1, 2, 3]

    # analyze, Ctrl-C once the first rank's results are published
    analyze = ["analyze", "-q", "--lake", str(lake), "--workers", "1", "--method", "ctda"]
    done = _ctrl_c_when(analyze, lambda: bool(_ranks_with(lake, "critical_path")))
    analysed = _ranks_with(lake, "critical_path")
    assert 1 <= len(analysed) < 4, analysed
    assert interrupted_line(done) == (f"interrupted; the lake keeps the new results of run 'job' "
                                      f"{_names(analysed)}; the other ranks keep what they had; run the same "
                                      "command again to finish")
