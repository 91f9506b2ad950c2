"""The cluster file of `whatif --cluster FILE.toml` (docs/whatif.md, "The cluster file"):
read, checked key by key, and turned into a ClusterSpec."""

from __future__ import annotations

import dataclasses
import math
import os
import stat
import tomllib
from dataclasses import dataclass

from ctda_sql.core.errors import CtdaError
from ctda_sql.whatif.changes import MAX_WORLD_SIZE

TOPOLOGIES = ("shared-link", "single-switch", "leaf-spine")
# a device's link when a host has one device and [intra_host] is not given: never the limit
UNLIMITED_GBPS = 1e6
# physical ranges of the keys: beyond them a transfer takes forever or no time,
# and SimGrid's solver or the replay's processor sharing meets inf or NaN
MIN_GBPS, MAX_GBPS = 1e-6, 1e6
MAX_LATENCY_US = 1e7
MIN_SPEED, MAX_SPEED = 1e-6, 1e6      # --scale's factors are 1 / speed: the same bounds
# a cluster file is a few hundred bytes: a bound keeps /dev/zero or a huge file from filling memory
MAX_FILE_BYTES = 1 << 20


# ---- the cluster file --------------------------------------------------------------------

@dataclass(frozen=True)
class ClusterSpec:
    hosts: int
    devices_per_host: int
    topology: str
    inter_bandwidth_gbps: float
    inter_latency_us: float = 0.0
    intra_bandwidth_gbps: float = UNLIMITED_GBPS
    intra_latency_us: float = 0.0
    device_speed: float = 1.0
    groups: tuple[tuple[int, int, float], ...] = ()     # (first_host, last_host, device_speed)
    hosts_per_leaf: int | None = None
    uplink_gbps: float | None = None

    @property
    def devices(self) -> int:
        return self.hosts * self.devices_per_host

    def speed_of(self, device: int) -> float:
        host = device // self.devices_per_host
        speed = self.device_speed
        for first, last, group_speed in self.groups:
            if first <= host <= last:
                speed = group_speed
        return speed

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# section -> key -> (type, required); a key given twice by a sweep is an override
KEYS = {
    "cluster": {"hosts": (int, True), "devices_per_host": (int, True), "device_speed": (float, False),
                "groups": (list, False)},
    "intra_host": {"bandwidth_gbps": (float, False), "latency_us": (float, False)},
    "inter_host": {"topology": (str, True), "bandwidth_gbps": (float, True), "latency_us": (float, False),
                   "hosts_per_leaf": (int, False), "uplink_gbps": (float, False)},
}
GROUP_KEYS = {"first_host": (int, True), "last_host": (int, True), "device_speed": (float, True)}


def load_cluster(path: str | os.PathLike, overrides: dict[str, object] | None = None) -> ClusterSpec:
    """Read and check a cluster file (docs/whatif.md); every problem is reported, one line
    per bad key. `overrides`: {"inter_host.bandwidth_gbps": 100, ...} (a sweep)."""
    return cluster_from_file_data(read_cluster_file(path), path, overrides)


def read_cluster_file(path: str | os.PathLike) -> dict:
    """The file's TOML as a dict, not yet checked: read once, then checked with each sweep
    value's overrides by cluster_from_file_data."""
    text = read_cluster_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CtdaError(f"cluster file {path} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise CtdaError(f"cluster file {path} nests arrays or tables too deeply to be a cluster file") from None


def cluster_from_file_data(data: dict, path: str | os.PathLike,
                           overrides: dict[str, object] | None = None) -> ClusterSpec:
    """The checked ClusterSpec of a file's dict (read_cluster_file) with `overrides` applied
    to a copy: the dict stays as read, for the next value of a sweep."""
    data = dict(data)
    for key, value in (overrides or {}).items():
        section, _, name = key.partition(".")
        if not isinstance(data.get(section, {}), dict):
            raise CtdaError(f"cluster file {path}: [{section}] must be a table")
        data[section] = {**data.get(section, {}), name: value}
    return check_cluster(data, str(path))


def read_cluster_text(path: str | os.PathLike) -> str:
    """The file's text: only a regular file (a FIFO would block the read, /dev/zero never
    end), of at most MAX_FILE_BYTES. Opened without blocking and checked on the open file,
    so a FIFO put in its place after a check is refused too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CtdaError(f"cluster file {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise CtdaError(f"cluster file {path} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode)
                    else "a device or socket")
            raise CtdaError(f"cluster file {path} is not a regular file ({kind}); give a TOML file")
        try:
            data = file.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise CtdaError(f"cluster file {path} cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise CtdaError(f"cluster file {path} is larger than {MAX_FILE_BYTES // 1024} KiB: "
                        "a cluster file is a few sections of keys")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CtdaError(f"cluster file {path} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None


def _checked_table(table: dict, keys: dict[str, tuple[type, bool]], label: str, path: str,
                   problems: list[str]) -> dict:
    """The checked values of a section or a group: a problem line, headed `label` ('[section]'
    or '[[cluster.groups]] #2'), per unknown, missing or bad key; values are checked as
    `path.key`."""
    for key in table:
        if key not in keys:
            problems.append(f"{label} {key}: unknown key (known: {', '.join(keys)})")
    values = {}
    for key, (kind, required) in keys.items():
        if key not in table:
            if required:
                problems.append(f"{label} {key}: missing")
            continue
        value, error = _checked(table[key], kind, f"{path}.{key}")
        if error:
            problems.append(f"{label} {key}: {error}")
        else:
            values[key] = value
    return values


def check_cluster(data: dict, where: str = "cluster file") -> ClusterSpec:
    problems: list[str] = []
    values: dict[str, dict] = {}
    for section in data:
        if section not in KEYS:
            problems.append(f"[{section}]: unknown section (known: {', '.join(KEYS)})")
    for section, keys in KEYS.items():
        table = data.get(section, {})
        if not isinstance(table, dict):
            problems.append(f"[{section}]: must be a table")
            continue
        values[section] = _checked_table(table, keys, f"[{section}]", section, problems)
    cluster, intra, inter = values.get("cluster", {}), values.get("intra_host", {}), values.get("inter_host", {})
    groups = []
    for i, group in enumerate(cluster.get("groups", [])):
        if not isinstance(group, dict):
            problems.append(f"[[cluster.groups]] #{i + 1}: must be a table")
            continue
        row = _checked_table(group, GROUP_KEYS, f"[[cluster.groups]] #{i + 1}", "cluster.groups", problems)
        if len(row) == 3:
            if row["last_host"] < row["first_host"] or ("hosts" in cluster and row["last_host"] >= cluster["hosts"]):
                problems.append(f"[[cluster.groups]] #{i + 1}: hosts {row['first_host']}-{row['last_host']} "
                                f"are not within 0-{cluster.get('hosts', 1) - 1}")
            groups.append((row["first_host"], row["last_host"], row["device_speed"]))
    topology = inter.get("topology")
    if topology == "leaf-spine":
        for key in ("hosts_per_leaf", "uplink_gbps"):
            if key not in inter and key not in _given(data, "inter_host"):
                problems.append(f"[inter_host] {key}: missing (leaf-spine needs it)")
    if cluster.get("devices_per_host", 1) > 1 and "bandwidth_gbps" not in _given(data, "intra_host"):
        problems.append("[intra_host] bandwidth_gbps: missing (devices_per_host > 1)")
    if "hosts" in cluster and "devices_per_host" in cluster \
            and cluster["hosts"] * cluster["devices_per_host"] > MAX_WORLD_SIZE:
        problems.append(f"[cluster]: {cluster['hosts']:,} hosts x {cluster['devices_per_host']:,} devices_per_host "
                        f"is more than {MAX_WORLD_SIZE:,} devices (the what-if's rank cap)")
    if problems:
        raise CtdaError(f"{where}: {len(problems)} bad key{'s' if len(problems) > 1 else ''}:\n  "
                        + "\n  ".join(problems))
    return ClusterSpec(
        hosts=cluster["hosts"], devices_per_host=cluster["devices_per_host"], topology=topology,
        inter_bandwidth_gbps=inter["bandwidth_gbps"], inter_latency_us=inter.get("latency_us", 0.0),
        intra_bandwidth_gbps=intra.get("bandwidth_gbps", UNLIMITED_GBPS),
        intra_latency_us=intra.get("latency_us", 0.0), device_speed=cluster.get("device_speed", 1.0),
        groups=tuple(groups), hosts_per_leaf=inter.get("hosts_per_leaf"), uplink_gbps=inter.get("uplink_gbps"))


def _given(data: dict, section: str) -> dict:
    """A section's keys as given (a section that is no table has none: it has its own line)."""
    table = data.get(section, {})
    return table if isinstance(table, dict) else {}


def _checked(value, kind, key: str):
    """(value, None) or (None, why it is bad)."""
    if kind is str:
        if key == "inter_host.topology" and value not in TOPOLOGIES:
            return None, f"{value!r} is not one of {', '.join(TOPOLOGIES)}"
        return (value, None) if isinstance(value, str) else (None, "must be a string")
    if kind is list:
        return (value, None) if isinstance(value, list) else (None, "must be a list of tables")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"{value!r} is not a number"
    if kind is int:
        # a group's hosts count from host 0; a count of hosts or devices from 1
        least, most = (0, MAX_WORLD_SIZE - 1) if key.startswith("cluster.groups.") else (1, MAX_WORLD_SIZE)
        if not (math.isfinite(value) and value == int(value) and least <= value <= most):
            return None, f"{value!r} must be a whole number from {least} to {most:,}"
        return int(value), None
    least, most, unit = _RANGES[key.rpartition(".")[2]]
    if not (math.isfinite(value) and least <= value <= most):
        return None, f"{value!r} must be from {least:g} to {most:g}{unit}"
    return float(value), None


# a number key's last part -> its physical range and what it means
_RANGES = {
    "bandwidth_gbps": (MIN_GBPS, MAX_GBPS, " Gbit/s"),
    "uplink_gbps": (MIN_GBPS, MAX_GBPS, " Gbit/s"),
    "latency_us": (0.0, MAX_LATENCY_US, " µs"),
    "device_speed": (MIN_SPEED, MAX_SPEED, " (a device's speed, the measured device's being 1)"),
}
