"""`whatif --cluster` under hostile and odd input (issue 43): the cluster file (what it may be,
how big, which values), the SimGrid child (its time, its answer, its end), the transaction
a projection or a sweep is stored in, and the combinations that are refused. Every test here
runs in the default tier; the ones that replay a recorded run need SimGrid (CI has it)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ctda_sql.whatif.cluster as cluster
import ctda_sql.whatif.cluster_file as cluster_file_module
import ctda_sql.whatif.cluster_sim as cluster_sim
from ctda_sql.api import Warehouse
from ctda_sql.core.errors import CtdaError
from ctda_sql.whatif.changes import Scale, Scenario
from ctda_sql.whatif.cluster import (
    check_cluster,
    cluster_scenario,
    load_cluster,
    processor_sharing,
    simgrid_available,
    simulate_rounds,
    whatif_cluster,
    whatif_clusters,
)

DATA = Path(__file__).parents[1] / "data"
RUN = "r2-400m-1"          # gloo DDP, 2 ranks over a 400 Mbit/s shaped loopback
SHARED_LINK = '[cluster]\nhosts = 2\ndevices_per_host = 1\n[inter_host]\ntopology = "shared-link"\nbandwidth_gbps = 0.4\n'


def shared_link(**inter) -> dict:
    return {"cluster": {"hosts": 2, "devices_per_host": 1},
            "inter_host": {"topology": "shared-link", "bandwidth_gbps": 0.4, **inter}}


def needs_simgrid():
    if not simgrid_available():
        if os.environ.get("CI"):
            pytest.fail("SimGrid is not installed: `apt-get install python3-simgrid` (.ci/run does)")
        pytest.skip("SimGrid is not installed: `apt-get install python3-simgrid`")


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> Path:
    """A database with the recorded 2-rank gloo run analysed (closed: each test opens it)."""
    db = tmp_path_factory.mktemp("cluster") / "w.duckdb"
    with Warehouse(db) as warehouse:
        warehouse.ingest(DATA / "shaped" / RUN, run=RUN)
        warehouse.analyze()
    return db


@pytest.fixture
def cluster_file(tmp_path) -> Path:
    path = tmp_path / "shared.toml"
    path.write_text(SHARED_LINK)
    return path


def stored(db: Path) -> tuple[int, int]:
    """(whatif_steps rows, whatif_cluster_links rows)."""
    with Warehouse(db) as warehouse:
        tables = {t for (t,) in warehouse.con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        steps = warehouse.con.execute("SELECT count(*) FROM whatif_steps").fetchone()[0] if "whatif_steps" in tables else 0
        links = (warehouse.con.execute("SELECT count(*) FROM whatif_cluster_links").fetchone()[0]
                 if "whatif_cluster_links" in tables else 0)
    return steps, links


def one_error_line(result) -> str:
    assert result.code != 0, result.out
    assert "Traceback" not in result.err, result.err
    errors = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.err
    return result.err


def within(seconds: float, call):
    """call() in a thread; its result or exception, or a failure when it is not back in time
    (a hang must fail the test, not hold the suite)."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# ---- High 2: --no-coupling would drop the cluster's network ---------------------------------

def test_cluster_with_no_coupling_is_refused_in_one_line(analysed, cluster_file, run_cli):
    needs_simgrid()
    err = one_error_line(run_cli("whatif", "--cluster", str(cluster_file), "--no-coupling", db=analysed))
    assert "leave out --no-coupling" in err
    with Warehouse(analysed) as warehouse, pytest.raises(CtdaError, match="leave out --no-coupling"):
        warehouse.whatif(run=RUN, cluster=shared_link(), coupled=False)
    assert stored(analysed) == (0, 0)


def test_a_projection_that_does_not_settle_does_not_send_users_to_no_coupling(analysed, monkeypatch):
    """Only a cluster's gloo chains share links (the passes that may not settle), and
    --cluster refuses --no-coupling: the error must not point there."""
    needs_simgrid()
    import ctda_sql.whatif.ordered as ordered
    from ctda_sql.whatif import graph

    monkeypatch.setattr(graph.Coupling, "FAST_ROUNDS", 0)      # the ordered pass at once
    monkeypatch.setattr(ordered, "MAX_SHARING_PASSES", 0)
    with Warehouse(analysed) as warehouse, pytest.raises(CtdaError) as error:
        warehouse.whatif(run=RUN, cluster=shared_link(), name="unsettled")
    assert "did not settle" in str(error.value) and "--no-coupling" not in str(error.value)
    assert stored(analysed) == (0, 0)


# ---- High 3: what the cluster file may be -------------------------------------------------

def test_a_fifo_as_the_cluster_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "cluster.toml"
    os.mkfifo(fifo)
    with pytest.raises(CtdaError, match=r"not a regular file \(a named pipe \(FIFO\)\)"):
        within(10, lambda: load_cluster(fifo))


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_an_endless_device_as_the_cluster_file_is_refused(device):
    with pytest.raises(CtdaError, match=r"not a regular file \(a device or socket\)"):
        within(10, lambda: load_cluster(device))


def test_a_cluster_file_over_1_mib_is_refused_without_reading_it_all(tmp_path):
    big = tmp_path / "big.toml"
    big.write_text(SHARED_LINK + "# " + "x" * (2 << 20) + "\n")
    with pytest.raises(CtdaError, match="larger than 1024 KiB"):
        load_cluster(big)


def test_the_command_line_refuses_a_device_in_one_line(run_cli):
    err = one_error_line(within(30, lambda: run_cli("whatif", "--cluster", "/dev/zero")))
    assert "not a regular file" in err


# ---- High 4: every key within a physical range; nothing non-finite reaches the solver --------

@pytest.mark.parametrize("section, key, value, expected", [
    ("inter_host", "latency_us", 1.7e308, "from 0 to 1e+07 µs"),
    ("inter_host", "latency_us", -1.0, "from 0 to 1e+07 µs"),
    ("inter_host", "bandwidth_gbps", 1e-305, "from 1e-06 to 1e+06 Gbit/s"),
    ("inter_host", "bandwidth_gbps", 5e-324, "from 1e-06 to 1e+06 Gbit/s"),
    ("inter_host", "bandwidth_gbps", 1e300, "from 1e-06 to 1e+06 Gbit/s"),
    ("intra_host", "bandwidth_gbps", 1e-7, "from 1e-06 to 1e+06 Gbit/s"),
    ("intra_host", "latency_us", 2e7, "from 0 to 1e+07 µs"),
    ("cluster", "hosts", 2_000_000, "from 1 to 1,000,000"),
    ("cluster", "devices_per_host", 10**7, "from 1 to 1,000,000"),
])
def test_a_value_outside_its_physical_range_is_refused(section, key, value, expected):
    data = shared_link()
    data.setdefault(section, {})[key] = value
    with pytest.raises(CtdaError) as error:
        check_cluster(data)
    assert f"[{section}] {key}: {value!r} must be" in str(error.value)
    assert expected in str(error.value)


def test_an_uplink_outside_its_range_and_a_cluster_past_the_rank_cap_are_refused():
    data = {"cluster": {"hosts": 2_000, "devices_per_host": 1_000},
            "intra_host": {"bandwidth_gbps": 100},
            "inter_host": {"topology": "leaf-spine", "bandwidth_gbps": 100, "hosts_per_leaf": 2, "uplink_gbps": 1e7}}
    with pytest.raises(CtdaError) as error:
        check_cluster(data)
    lines = str(error.value).splitlines()
    assert any("[inter_host] uplink_gbps: 10000000.0 must be from 1e-06 to 1e+06 Gbit/s" in line for line in lines)
    assert any("2,000 hosts x 1,000 devices_per_host is more than 1,000,000 devices" in line for line in lines)


def test_processor_sharing_refuses_an_infinite_transfer_at_once():
    """inf - inf is NaN in the virtual clock, and a NaN never ends the loop."""
    with pytest.raises(CtdaError, match="not a finite time"):
        within(5, lambda: processor_sharing(np.array([0.0, 1.0]), np.array([np.inf, 5.0])))
    with pytest.raises(CtdaError, match="not a finite time"):
        within(5, lambda: processor_sharing(np.array([0.0, 1.0]), np.array([np.nan, 5.0])))


def test_the_slowest_and_longest_links_allowed_give_finite_predictions(analysed):
    needs_simgrid()
    slow = shared_link(latency_us=1e7)
    slow["inter_host"]["bandwidth_gbps"] = 1e-6
    with Warehouse(analysed) as warehouse:
        rows = within(120, lambda: warehouse.whatif(run=RUN, cluster=slow, name="slowest")
                      .project("predicted_us").fetchall())
        warehouse.con.execute("DELETE FROM whatif_steps; DELETE FROM whatif_path; DELETE FROM whatif_cluster_links")
    assert rows and all(np.isfinite(us) and us > 1e9 for (us,) in rows)


# ---- Medium 1 and 2: integer keys that are inf or nan; deep nesting -------------------------

@pytest.mark.parametrize("key", ["hosts", "devices_per_host", "hosts_per_leaf"])
@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_inf_or_nan_in_an_integer_key_is_one_line_per_key(tmp_path, run_cli, key, value):
    text = ('[cluster]\nhosts = 4\ndevices_per_host = 1\n[inter_host]\ntopology = "leaf-spine"\n'
            'bandwidth_gbps = 100\nhosts_per_leaf = 2\nuplink_gbps = 50\n')
    text = text.replace(f"\n{key} = ", f"\n{key} = {value}\n# was ")
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(CtdaError, match=rf"{key}: {value} must be a whole number from 1 to 1,000,000"):
        load_cluster(path)
    err = one_error_line(run_cli("whatif", "--cluster", str(path)))
    assert f"{key}: " in err and "must be a whole number from 1 to 1,000,000" in err
    section = "inter_host" if key == "hosts_per_leaf" else "cluster"
    data = {"cluster": {"hosts": 4, "devices_per_host": 1},
            "inter_host": {"topology": "leaf-spine", "bandwidth_gbps": 100, "hosts_per_leaf": 2, "uplink_gbps": 50}}
    data[section][key] = float(value)
    with pytest.raises(CtdaError, match="must be a whole number"):
        check_cluster(data)


def test_toml_nested_100000_deep_is_one_error_line(tmp_path, run_cli):
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(CtdaError, match="nests arrays or tables too deeply"):
        load_cluster(path)
    assert "too deeply" in one_error_line(run_cli("whatif", "--cluster", str(path)))


# ---- Medium 3 and 4: one transaction for a projection, its links and a sweep ------------------

def test_a_sweep_with_a_bad_value_after_good_ones_stores_nothing(analysed, cluster_file, run_cli):
    needs_simgrid()
    err = one_error_line(run_cli("whatif", "--cluster", str(cluster_file), "--sweep",
                                 "inter_host.bandwidth_gbps=0.4,0.2,1e-300", db=analysed))
    assert "bandwidth_gbps: 1e-300 must be from 1e-06" in err
    assert stored(analysed) == (0, 0)


def test_a_sweep_of_world_sizes_names_the_bad_value(cluster_file, run_cli):
    err = one_error_line(run_cli("whatif", "--cluster", str(cluster_file), "--sweep", "world-size=2,abc"))
    assert "values must be whole numbers, not 'abc'" in err


def test_a_cluster_sweep_has_the_cap_of_plain_sweeps(cluster_file, run_cli):
    values = ",".join(str(0.1 + i / 1000) for i in range(201))
    err = one_error_line(run_cli("whatif", "--cluster", str(cluster_file), "--sweep",
                                 f"inter_host.bandwidth_gbps={values}"))
    assert "201 values; at most 200 in one sweep" in err


def test_a_sweep_interrupted_after_its_first_value_stores_nothing(analysed):
    """Ctrl-C (here raised after the first value is stored) rolls the whole sweep back."""
    needs_simgrid()
    from ctda_sql.core.transaction import Interrupted

    with Warehouse(analysed) as warehouse:
        scenarios = [(f"sweep {gbps}", cluster_scenario(warehouse.con, check_cluster(shared_link(bandwidth_gbps=gbps)),
                                                        run=RUN)) for gbps in (0.4, 0.2)]

        def ctrl_c():
            raise KeyboardInterrupt

        with pytest.raises(Interrupted) as interrupted:
            whatif_clusters(warehouse.con, scenarios, run=RUN, top=0, progress=ctrl_c)
        assert not interrupted.value.saved
    assert stored(analysed) == (0, 0)


def test_the_links_are_stored_in_the_projections_transaction(analysed, monkeypatch):
    """A failure while the links are stored leaves no scenario without its links."""
    needs_simgrid()
    real = cluster._persist_links

    def fails_after_storing(con, scenario, transfers):
        real(con, scenario, transfers)
        raise CtdaError("killed while storing the links")

    monkeypatch.setattr(cluster, "_persist_links", fails_after_storing)
    with Warehouse(analysed) as warehouse, pytest.raises(CtdaError, match="killed while storing"):
        whatif_cluster(warehouse.con, check_cluster(shared_link()), run=RUN, name="half")
    assert stored(analysed) == (0, 0)
    monkeypatch.setattr(cluster, "_persist_links", real)
    with Warehouse(analysed) as warehouse:
        result, links = whatif_cluster(warehouse.con, check_cluster(shared_link()), run=RUN, name="whole")
        counts = warehouse.con.execute(
            "SELECT (SELECT count(*) FROM whatif_steps WHERE scenario = 'whole'), "
            "(SELECT count(*) FROM whatif_cluster_links WHERE scenario = 'whole')").fetchone()
        warehouse.con.execute("DELETE FROM whatif_steps; DELETE FROM whatif_path; DELETE FROM whatif_cluster_links")
    assert counts == (len(result.steps), len(links)) and counts[1] > 0


# ---- Medium 5: the simulated cluster's size and the child's time and end ---------------------

@pytest.mark.parametrize("world", [100_000, 10**7, 2**63])
def test_a_simulated_cluster_past_the_cap_is_refused_saying_its_memory(world):
    spec = check_cluster(shared_link())
    start = time.monotonic()
    with pytest.raises(CtdaError, match=r"ranks would need about [\d,]+ GiB; at most 16,384 ranks"):
        cluster_scenario(None, spec, world_size=world)
    assert time.monotonic() - start < 1


def fake_child(tmp_path: Path, body: str) -> Path:
    """A stand-in for the SimGrid child: the real cluster_sim.main() with `simulate` replaced."""
    script = tmp_path / "fake_sim.py"
    script.write_text("\n".join([
        "import json, os, signal, sys, time",
        f"sys.path.insert(0, {str(Path(cluster_sim.__file__).parent)!r})",
        "import cluster_sim",
        "def simulate(request):",
        textwrap.indent(textwrap.dedent(body), "    "),
        "cluster_sim.simulate = simulate",
        "cluster_sim.main()", ""]))
    return script


@pytest.fixture
def with_child(tmp_path, monkeypatch):
    """Point simulate_rounds at a fake child (SimGrid itself is not needed)."""
    def use(body: str):
        monkeypatch.setattr(cluster, "SIM_SCRIPT", fake_child(tmp_path, body))
        monkeypatch.setattr(cluster, "simgrid_available", lambda: True)
    return use


ONE_ROUND = [((0, 1, 1e6),)]


def test_a_hanging_child_is_ended_by_the_timeout(with_child, monkeypatch):
    with_child("time.sleep(60)")
    monkeypatch.setattr(cluster, "SIM_TIMEOUT_S", 1.0)
    with pytest.raises(CtdaError, match="did not finish in 1 s"):
        within(30, lambda: simulate_rounds(check_cluster(shared_link()), ONE_ROUND))


def test_sigterm_to_the_whatif_ends_its_simgrid_child(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = fake_child(tmp_path, f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import ctda_sql.whatif.cluster as cluster
        cluster.SIM_SCRIPT, cluster.simgrid_available = {str(script)!r}, lambda: True
        cluster.simulate_rounds(cluster.check_cluster({shared_link()!r}), {ONE_ROUND!r})
        """)])
    child = None
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        parent.send_signal(signal.SIGTERM)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child)
    finally:
        parent.kill()
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)


def alive(pid: int) -> bool:
    """Running (a zombie that no one reaped has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# ---- Medium 6 and Low: the child's answer and its end ---------------------------------------

@pytest.mark.parametrize("body, expected", [
    ("sys.exit(0)", "no answer that can be read"),                       # nothing on stdout
    ("return None", "answer is not one finite time per round"),
    ("return {'rounds': []}", "answer is not one finite time per round"),
    ("return {'rounds': [{'us': float('nan'), 'link': 'x', 'busy_us': 0}]}", "not one finite time"),
])
def test_an_answer_that_is_not_one_time_per_round_is_one_error_line(with_child, body, expected):
    with_child(body)
    with pytest.raises(CtdaError, match=expected):
        simulate_rounds(check_cluster(shared_link()), ONE_ROUND)


def test_chatter_on_the_childs_stdout_does_not_spoil_its_answer(with_child):
    with_child("print('SimGrid [0.000000] chatter on stdout')\n"
               "return {'rounds': [{'us': 12.5, 'link': 'shared', 'busy_us': 12.5}]}")
    assert simulate_rounds(check_cluster(shared_link()), ONE_ROUND) == [{"us": 12.5, "link": "shared", "busy_us": 12.5}]


def test_a_killed_child_is_named_by_its_signal(with_child):
    with_child("os.kill(os.getpid(), signal.SIGKILL)")
    with pytest.raises(CtdaError, match="killed by SIGKILL"):
        simulate_rounds(check_cluster(shared_link()), ONE_ROUND)


# ---- the cluster file is read once: where the options are checked, before the database opens ----

@pytest.fixture
def file_reads(monkeypatch) -> list[str]:
    """The paths the cluster file's reader is asked for, in order."""
    reads: list[str] = []
    real = cluster_file_module.read_cluster_text
    monkeypatch.setattr(cluster_file_module, "read_cluster_text", lambda path: reads.append(str(path)) or real(path))
    return reads


@pytest.mark.parametrize("sweep", [(), ("--sweep", "inter_host.bandwidth_gbps=0.4,0.2"),
                                   ("--sweep", "allreduce=ring,tree")])
def test_the_command_line_reads_the_cluster_file_once(analysed, cluster_file, run_cli, file_reads, sweep):
    needs_simgrid()
    try:
        result = run_cli("whatif", "--cluster", str(cluster_file), *sweep, "--name", "read once", db=analysed)
        assert result.code == 0, result.err
        assert file_reads == [str(cluster_file)]
        assert stored(analysed)[0] > 0
    finally:
        with Warehouse(analysed) as warehouse:
            warehouse.con.execute("DELETE FROM whatif_steps; DELETE FROM whatif_path; DELETE FROM whatif_cluster_links")


def test_a_bad_sweep_value_is_named_after_one_read_and_before_the_database_opens(tmp_path, cluster_file, run_cli,
                                                                                 file_reads):
    missing = tmp_path / "missing.duckdb"
    err = one_error_line(run_cli("whatif", "--cluster", str(cluster_file), "--sweep",
                                 "inter_host.bandwidth_gbps=0.4,1e-300", db=missing))
    assert "bandwidth_gbps: 1e-300 must be from 1e-06" in err
    assert file_reads == [str(cluster_file)]
    assert not missing.exists()


def test_the_python_api_reads_a_cluster_path_once(analysed, cluster_file, file_reads):
    needs_simgrid()
    with Warehouse(analysed) as warehouse:
        try:
            assert warehouse.whatif(run=RUN, cluster=str(cluster_file), name="api read once").fetchall()
            assert file_reads == [str(cluster_file)]
        finally:
            warehouse.con.execute("DELETE FROM whatif_steps; DELETE FROM whatif_path; DELETE FROM whatif_cluster_links")


# ---- Low -------------------------------------------------------------------------------------

def test_an_empty_cluster_name_is_refused_not_ignored(run_cli):
    err = one_error_line(run_cli("whatif", "--cluster", ""))
    assert "--cluster needs a cluster file" in err
    with Warehouse(":memory:") as warehouse, pytest.raises(CtdaError, match="not an empty name"):
        warehouse.whatif(cluster="")


def test_world_size_1_with_a_cluster_says_what_is_wrong_with_it(analysed, cluster_file, run_cli):
    needs_simgrid()
    err = one_error_line(run_cli("whatif", "--cluster", str(cluster_file), "--world-size", "1", db=analysed))
    assert "--world-size 1 with --cluster" in err and "give 2 or more" in err


@pytest.mark.parametrize("where", ["cluster", "group"])
def test_a_device_speed_below_1e_6_is_refused_in_cluster_words(where):
    data = shared_link()
    if where == "cluster":
        data["cluster"]["device_speed"] = 1e-7
    else:
        data["cluster"]["groups"] = [{"first_host": 0, "last_host": 0, "device_speed": 1e-7}]
    with pytest.raises(CtdaError) as error:
        check_cluster(data)
    assert "device_speed: 1e-07 must be from 1e-06 to 1e+06" in str(error.value)
    assert "--scale" not in str(error.value)


@pytest.mark.parametrize("value", [5, 2.5, [1, 2], b"cluster.toml"])
def test_a_cluster_of_the_wrong_type_is_a_ctda_error(value):
    with Warehouse(":memory:") as warehouse, pytest.raises(CtdaError, match="cluster must be a path"):
        warehouse.whatif(cluster=value)


# ---- First use 2: example cluster files, and every key documented -----------------------------

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("cluster-*.toml"))
WHATIF_DOC = (ROOT / "docs" / "whatif.md").read_text(encoding="utf-8")


def test_the_three_example_cluster_files_are_shipped():
    assert [p.name for p in EXAMPLES] == ["cluster-heterogeneous.toml", "cluster-leaf-spine.toml",
                                          "cluster-shared-link.toml"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_an_example_cluster_file_parses_and_is_in_the_doc(path):
    spec = load_cluster(path)
    assert spec.devices >= 2
    assert f"`{path.name}`" in WHATIF_DOC and f"docs/examples/{path.name}" in path.read_text() + WHATIF_DOC


# the run's own 2 ranks, and 32 ranks where the cluster has the devices
@pytest.mark.parametrize("path, world", [(p, w) for p in EXAMPLES for w in (None, 32)
                                         if w is None or load_cluster(p).devices >= w], ids=str)
def test_a_whatif_runs_with_an_example_cluster_file(analysed, run_cli, path, world):
    needs_simgrid()
    args = ["whatif", "--run", RUN, "--cluster", str(path), "--format", "json", "--name", f"{path.stem} {world}"]
    result = run_cli(*args, *(["--world-size", str(world)] if world else []), db=analysed)
    assert result.code == 0, result.err
    steps = json.loads(result.out)["steps"]
    assert steps and all(0 < s["predicted_us"] < 1e12 for s in steps)


def test_heterogeneous_hosts_slow_the_steps_that_reach_them(analysed):
    """32 ranks reach hosts 4-7 (half speed); the same file with every host at full speed is faster."""
    needs_simgrid()
    mixed = load_cluster(ROOT / "docs" / "examples" / "cluster-heterogeneous.toml")
    even = dataclasses.replace(mixed, groups=())
    with Warehouse(analysed) as warehouse:
        slow = whatif_cluster(warehouse.con, mixed, run=RUN, world_size=32, name="mixed")[0].steps
        fast = whatif_cluster(warehouse.con, even, run=RUN, world_size=32, name="even")[0].steps
        warehouse.con.execute("DELETE FROM whatif_steps; DELETE FROM whatif_path; DELETE FROM whatif_cluster_links")
    assert sum(s[5] for s in slow) > 1.2 * sum(s[5] for s in fast)


def test_every_key_of_the_cluster_file_is_documented_and_no_outside_design_is_pointed_at():
    from ctda_sql.whatif.cluster_file import GROUP_KEYS, KEYS

    table = WHATIF_DOC.split("### The cluster file", 1)[1].split("**Where ranks go.**", 1)[0]
    for section, keys in KEYS.items():
        for key in keys:
            if key == "groups":
                assert "`[[cluster.groups]]`" in table
                continue
            assert any(line.startswith(f"| `[{section}]` | `{key}`") for line in table.splitlines()), (section, key)
    for key in GROUP_KEYS:
        assert any(line.startswith("| `[[cluster.groups]]` |") and f"`{key}`" in line for line in table.splitlines())
    for words in ("**Where ranks go.**", "**`device_speed`.**", "host-major"):
        assert words in WHATIF_DOC.lower() or words in WHATIF_DOC
    assert "DESIGN.md" not in WHATIF_DOC


# ---- Medium 8: a matched cycle is refused at once, naming the collective ----------------------

@dataclasses.dataclass(frozen=True)
class CyclicGate(Scenario):
    """A scenario whose graph holds a matched cycle: the last collective's completion gates
    the very node that makes one of its arrivals (what an inconsistent matching makes, e.g.
    two ranks' calls paired within the matching tolerance in the wrong order)."""

    def apply(self, con) -> None:
        con.execute("INSERT INTO wi_coupled_gates SELECT group_index, window_index, anchor_seq, 10.0, false "
                    "FROM wi_coupled_arrivals WHERE anchor_seq >= 0 AND NOT pre_floor "
                    "ORDER BY group_index DESC, window_index LIMIT 1")


@pytest.fixture(scope="module")
def balanced(tmp_path_factory):
    with Warehouse(tmp_path_factory.mktemp("cycle") / "w.duckdb") as warehouse:
        warehouse.ingest(DATA / "gloo" / "balanced", run="balanced")
        warehouse.analyze()
        yield warehouse


def test_a_matched_cycle_is_refused_at_once_naming_the_collective(balanced, monkeypatch):
    from ctda_sql.whatif import graph
    from ctda_sql.whatif.replay import whatif

    passes = []
    real_pass = graph.Graph.forward_pass
    monkeypatch.setattr(graph.Graph, "forward_pass", lambda self, *a, **k: passes.append(1) or real_pass(self, *a, **k))
    start = time.monotonic()
    with pytest.raises(CtdaError) as error:
        whatif(balanced.con, run="balanced", scenario=CyclicGate(scales=(Scale("aten::add_", 0.5),)), persist=False)
    assert time.monotonic() - start < 30
    message = str(error.value)
    assert "form a cycle" in message and "run 'balanced', process group 0, seq" in message
    assert "rank 0 step" in message and "rank 1 step" in message
    # the unchanged replay's passes and the change's first rounds, not 10,000 rounds
    assert len(passes) <= 2 * (graph.Coupling.FAST_ROUNDS + 2)


def test_find_cycle_finds_a_growing_cycle_and_its_delay():
    from ctda_sql.whatif.ordered import find_cycle

    # 0 -> 1 -> 2 -> 3 -> 1 (a cycle of +6), 3 -> 4 after it, 5 alone
    src, dst = np.array([0, 1, 2, 3, 3]), np.array([1, 2, 3, 1, 4])
    cycle, weight = find_cycle(6, src, dst, np.array([9.0, 1.0, 2.0, 3.0, 7.0]))
    assert sorted(cycle) == [1, 2, 3] and weight == 6.0
    assert find_cycle(5, np.array([0, 1, 2]), np.array([1, 2, 3]), np.ones(3)) is None
