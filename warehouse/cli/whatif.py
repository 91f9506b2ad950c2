"""`ctda-sql whatif`: predict step time under a change (scale work, change the network)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
from dataclasses import dataclass
from statistics import mean

from ctda_sql.cli.lake import add_lake_option
from ctda_sql.cli.output import FORMATS, add_max_width, render, table_width
from ctda_sql.core.connection import connect, existing_db_path
from ctda_sql.core.errors import CtdaError
from ctda_sql.whatif.changes import ALGORITHMS, Scenario, parse_scale
from ctda_sql.whatif.cluster_file import ClusterSpec

# --sweep KEY -> Scenario field and how its values are read
SWEEP_KEYS = {
    "comm-bandwidth-scale": ("bandwidth_scale", float),
    "comm-latency-us": ("latency_us", float),
    "allreduce": ("allreduce", str),
    "world-size": ("world_size", int),
}
# a sweep replays every value in one transaction (~0.1-1 s each on a real run): a cap keeps a
# typo such as 10,000 values from running for an hour
MAX_SWEEP_VALUES = 200


class _ParseError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so the shell can show the message as an error."""

    def error(self, message):
        raise _ParseError(message)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", help="run name (default: every analysed run)")
    p.add_argument("--rank", type=int, help="only this rank's rows (a multi-rank run still replays every rank)")
    p.add_argument("--step", type=int, help="only this step")
    p.add_argument("--scale", action="append", metavar="[CAT:]PATTERN=FACTOR", default=[],
                   help="scale the execution time of events whose name matches the glob (optionally "
                        "of a category: kernel:*gemm*=0.5; optionally only on some ranks: "
                        "rank1:user_annotation:slow_rank=0); 0 removes the work (repeatable)")
    p.add_argument("--comm-bandwidth-scale", type=float, default=1.0, metavar="F",
                   help="multiply the fitted bus bandwidth of collectives by F")
    p.add_argument("--comm-latency-us", type=float, metavar="L", help="latency per collective step, µs")
    p.add_argument("--allreduce", choices=(*ALGORITHMS, "hierarchical"),
                   help="all-reduce algorithm (measured: ring; hierarchical: with --cluster)")
    p.add_argument("--cluster", metavar="FILE.toml",
                   help="project the job onto the cluster the file describes (docs/whatif.md)")
    p.add_argument("--world-size", type=int, metavar="N", help="ranks taking part in every collective")
    p.add_argument("--sweep", metavar="KEY=V1,V2,...",
                   help=f"one scenario per value of KEY ({', '.join(SWEEP_KEYS)}); prints a row per value; "
                        f"at most {MAX_SWEEP_VALUES} values, stored all together or not at all")
    p.add_argument("--drop-syncs", action="store_true",
                   help="no CPU work waits for the GPU in a blocking sync (.item(), .cpu(), "
                        "cudaStreamSynchronize ...): the syncs removed or made non-blocking")
    p.add_argument("--no-coupling", dest="coupled", action="store_false",
                   help="replay each rank on its own: collectives keep their measured waiting "
                        "(default: the ranks of a multi-rank run are replayed together)")
    p.add_argument("--name", help="scenario name in whatif_steps / whatif_path (default: the changes)")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="labels of the predicted path to print (default: 10)")


def add_parser(sub) -> None:
    p = sub.add_parser("whatif", help="predict step time under a change by replaying each step's graph",
                       description="Replay every analysed step's dependency graph with measured durations "
                                   "and slack, and again with the changes; results persist in "
                                   "whatif_steps and whatif_path. Run `ctda-sql analyze` first.")
    add_arguments(p)
    p.add_argument("--format", "-f", choices=FORMATS, default="table", help="output format (default: table)")
    add_max_width(p)
    p.add_argument("--db", default=argparse.SUPPRESS, help="database file")
    add_lake_option(p, help="replay a run of this Parquet lake (docs/scale-out.md); its scenarios are "
                            "printed, not stored: the lake's tables are read-only views")
    p.set_defaults(handler=cmd_whatif)


def cmd_whatif(args) -> int:
    from ctda_sql.core.config import load_config

    # kernel names run to hundreds of characters: tables fit the terminal, as query's do
    width = table_width(sys.stdout, args.max_width if args.max_width is not None else load_config().max_width)
    # the cluster file is read and checked here, once, before the database opens
    cluster = check_cluster_arguments(args) if args.cluster is not None else None
    con = _open(args)
    try:
        tables = run(con, args, show_progress=True, cluster=cluster)
    finally:
        con.close()
    if args.format == "json":
        # one document, as `query` and `report` print: {"steps": [...], "path": [...]}
        print("{" + ",\n".join(f"{json.dumps(key)}: {render(columns, rows, 'json')}"
                               for key, (columns, rows) in zip(_keys(args), tables)) + "}")
        return 0
    for (columns, rows), title in zip(tables, _titles(args, tables)):
        if title and args.format == "table":
            print(textwrap.fill(title, width) if width else title)
        print(render(*_table_view(columns, rows, args.format), args.format, width, keys=_SHOWN_FIRST))
    return 0


# the step table at 80 columns: the answer and the times that explain it (a step that starts
# sooner may wait longer for another rank, and read slower, while the rank gains in total)
_SHOWN_FIRST = ("rank", "step", "replay_us", "predicted_us", "speedup", "start_us", "end_us")


def _table_view(columns: list[str], rows: list[tuple], fmt: str) -> tuple[list[str], list[tuple]]:
    """The step table as a terminal shows it: where each step runs with the changes (start_us,
    end_us: predicted_start_us, predicted_end_us), without measured_us (the unchanged replay
    reproduces it), nor the run when there is one (the title names it). Other formats and
    tables print every column."""
    if fmt != "table" or "predicted_start_us" not in columns:
        return columns, rows
    runs = {row[0] for row in rows}
    shown = (["run"] if len(runs) > 1 else []) + ["rank", "step", "replay_us", "predicted_us", "speedup",
                                                   "predicted_start_us", "predicted_end_us"]
    at = [columns.index(name) for name in shown]
    named = {"predicted_start_us": "start_us", "predicted_end_us": "end_us"}
    return [named.get(name, name) for name in shown], [tuple(row[i] for i in at) for row in rows]


def _open(args):
    """The lake's views (--lake; the scenario's rows live in this process only) or the database."""
    if getattr(args, "lake", None) is not None:
        from ctda_sql.lake.views import open_lake

        return open_lake(args.lake, for_sql="")
    return connect(existing_db_path(args.db), for_sql="")


def _keys(args) -> list[str]:
    return ["sweep"] if args.sweep else ["steps", "totals", "path"] + (["links"] if getattr(args, "cluster", None) else [])


def _titles(args, tables) -> list[str | None]:
    """A line above each table saying what it holds."""
    if args.sweep:
        return [f"predicted step time per value of {args.sweep.partition('=')[0]} (means over the steps)"]
    steps = tables[0][1]
    ranks = len({(row[0], row[1]) for row in steps})
    runs = sorted({str(row[0]) for row in steps})
    return [(f"run {runs[0]}: " if len(runs) == 1 else "")
            + "each step replayed unchanged and with the changes; start_us and end_us: where it runs with "
              "the changes, from the replay's origin (a step that starts sooner may wait longer)",
            "per rank, its steps together: what the changes buy the rank", f"predicted critical path: the top {args.top} labels by predicted time "
                  f"({len(steps)} steps of {ranks} rank(s))", "links that limited the collectives, per step"]


def parse_shell_words(words: list[str]) -> argparse.Namespace:
    parser = _Parser(prog=".whatif", add_help=False)
    add_arguments(parser)
    try:
        return parser.parse_args(words)
    except _ParseError as exc:
        raise CtdaError(f".whatif: {exc}") from None


def run(con, args, show_progress: bool = False,
        cluster: CheckedCluster | None = None) -> list[tuple[list[str], list[tuple]]]:
    """The tables to print: steps, then the path's hotspots; or one row per sweep value.
    `cluster`: --cluster's file as check_cluster_arguments read it (None: read here)."""
    from ctda_sql.core.progress import progress_bar
    from ctda_sql.whatif.replay import HOTSPOT_COLUMNS, STEP_COLUMNS, SWEEP_COLUMNS, TOTAL_COLUMNS, whatif, whatif_many

    if args.top < 0:
        raise CtdaError("--top must be 0 or more")
    if getattr(args, "cluster", None) is not None:  # whatif --cluster: warehouse/whatif/cluster.py
        return run_cluster(con, args, show_progress, cluster)
    sweep = parse_sweep(args.sweep) if args.sweep else None
    scenario = scenario_from_args(con, args)
    where = {"run": args.run, "rank": args.rank, "step": args.step, "coupled": args.coupled}
    if sweep is None:
        result = whatif(con, **where, scenario=scenario, name=args.name, top=args.top)
        return [(STEP_COLUMNS, result.steps), (TOTAL_COLUMNS, result.totals), (HOTSPOT_COLUMNS, result.hotspots)]
    field, values = sweep
    key = args.sweep.partition("=")[0]
    scenarios = [(f"{args.name or 'sweep'} {key}={value}", dataclasses.replace(scenario, **{field: value}))
                 for value in values]
    with progress_bar(f"whatif --sweep {key}", len(scenarios), visible=show_progress) as advance:
        results = whatif_many(con, scenarios, **where, top=0, progress=advance)
    return [(SWEEP_COLUMNS, [_sweep_row(value, result) for value, result in zip(values, results)])]


def _sweep_row(value, result) -> tuple:
    """A sweep's row: the value, and the means over the steps."""
    steps = result.steps
    replay, predicted = mean(s[4] for s in steps), mean(s[5] for s in steps)
    return (value, len(steps), round(mean(s[3] for s in steps), 1), round(replay, 1),
            round(predicted, 1), round(replay / predicted, 4) if predicted else float("inf"))


def scenario_from_args(con, args) -> Scenario:
    from ctda_sql.whatif.replay import event_categories

    categories = event_categories(con) if args.scale else set()
    return Scenario(scales=tuple(parse_scale(text, categories) for text in args.scale),
                    bandwidth_scale=args.comm_bandwidth_scale, latency_us=args.comm_latency_us,
                    allreduce=args.allreduce, world_size=args.world_size,
                    drop_syncs=getattr(args, "drop_syncs", False))


def parse_sweep(text: str) -> tuple[str, list]:
    key, sep, values = text.partition("=")
    if not sep or key not in SWEEP_KEYS:
        raise CtdaError(f"--sweep {text!r} must look like KEY=V1,V2,... with KEY one of {', '.join(SWEEP_KEYS)}")
    field, kind = SWEEP_KEYS[key]
    words = [v.strip() for v in values.split(",")]
    if not all(words):
        raise CtdaError(f"--sweep {text!r}: every value between the commas must be given")
    if len(words) > MAX_SWEEP_VALUES:
        raise CtdaError(f"--sweep {key}: {len(words):,} values; at most {MAX_SWEEP_VALUES} in one sweep")
    try:
        return field, [kind(v) for v in words]
    except ValueError:
        raise CtdaError(f"--sweep {text!r}: values must be {'whole ' if kind is int else ''}numbers") from None


# ---- whatif --cluster FILE.toml --------------------------------------------------------------

def run_cluster(con, args, show_progress: bool = False,
                cluster: CheckedCluster | None = None) -> list[tuple[list[str], list[tuple]]]:
    """`whatif --cluster`: steps, the predicted path's hotspots and the limiting links; or, with
    --sweep KEY=V1,V2 (a cluster key such as inter_host.bandwidth_gbps, or allreduce or
    world-size), one row per value, every value checked and simulated before any is replayed,
    and all stored in one transaction. `cluster`: the file as check_cluster_arguments read it
    (None, from the shell's .whatif: read and checked here)."""
    from ctda_sql.core.progress import progress_bar
    from ctda_sql.whatif.cluster import LINK_COLUMNS, cluster_scenario, whatif_clusters
    from ctda_sql.whatif.replay import HOTSPOT_COLUMNS, STEP_COLUMNS, SWEEP_COLUMNS, TOTAL_COLUMNS, event_categories

    if cluster is None:
        cluster = check_cluster_arguments(args)
    categories = event_categories(con) if args.scale else set()
    scales = tuple(parse_scale(text, categories) for text in args.scale)
    where = {"run": args.run, "rank": args.rank, "step": args.step}
    options = {"world_size": args.world_size, "allreduce": args.allreduce}
    if not args.sweep:
        scenario = cluster_scenario(con, cluster.spec, run=args.run, scales=scales, **options)
        [(result, links)] = whatif_clusters(con, [(args.name or scenario.as_json(), scenario)], **where, top=args.top)
        return [(STEP_COLUMNS, result.steps), (TOTAL_COLUMNS, result.totals), (HOTSPOT_COLUMNS, result.hotspots),
                (LINK_COLUMNS, links)]
    key, values = cluster.sweep_key, [value for value, _, _ in cluster.sweep]
    scenarios = []
    with progress_bar(f"whatif --sweep {key}: simulating", len(values), visible=show_progress) as advance:
        for value, spec, changed in cluster.sweep:
            scenarios.append((f"{args.name or 'sweep'} {key}={value}",
                              cluster_scenario(con, spec, run=args.run, scales=scales, **{**options, **changed})))
            advance()
    with progress_bar(f"whatif --sweep {key}", len(values), visible=show_progress) as advance:
        results = whatif_clusters(con, scenarios, **where, top=0, progress=advance)
    return [(SWEEP_COLUMNS, [_sweep_row(value, result) for value, (result, _) in zip(values, results)])]


@dataclass(frozen=True)
class CheckedCluster:
    """--cluster's file, read once and checked: its spec and, with --sweep KEY=V1,V2,..., each
    value with its spec (a file key's value applied) and the options it sets (allreduce or
    world_size)."""
    spec: ClusterSpec
    sweep_key: str | None = None
    sweep: tuple[tuple[object, ClusterSpec, dict[str, object]], ...] = ()


def check_cluster_arguments(args) -> CheckedCluster:
    """--cluster's options, its file and a sweep's values, checked before a database opens:
    a bad file is named as such, even where the database is missing too. The file is read
    once; what the what-if runs on is the returned CheckedCluster."""
    from ctda_sql.whatif.cluster import NO_COUPLING
    from ctda_sql.whatif.cluster_file import cluster_from_file_data, read_cluster_file

    if not args.cluster.strip():
        raise CtdaError("--cluster needs a cluster file (FILE.toml; docs/whatif.md describes its keys)")
    if args.comm_bandwidth_scale != 1.0 or args.comm_latency_us is not None:
        raise CtdaError("--cluster describes the network: leave out --comm-bandwidth-scale and --comm-latency-us")
    if not args.coupled:
        raise CtdaError(NO_COUPLING)
    data = read_cluster_file(args.cluster)
    spec = cluster_from_file_data(data, args.cluster)
    if not args.sweep:
        return CheckedCluster(spec)
    key, values = parse_cluster_sweep(args.sweep)
    if key in CLUSTER_SWEEP_OPTIONS:
        sweep = tuple((value, spec, {key.replace("-", "_"): value}) for value in values)
    else:
        sweep = tuple((value, cluster_from_file_data(data, args.cluster, {key: value}), {}) for value in values)
    return CheckedCluster(spec, key, sweep)


# --sweep keys with --cluster besides the file's SECTION.KEY, and how their values are read
CLUSTER_SWEEP_OPTIONS = {"allreduce": str, "world-size": int}


def parse_cluster_sweep(text: str) -> tuple[str, list]:
    """--sweep KEY=V1,V2,... with --cluster: (KEY, values). A file key's values are numbers or
    words, checked as the file's own values are (load_cluster's overrides)."""
    key, sep, values = text.partition("=")
    words = [v.strip() for v in values.split(",")]
    if not sep or not (key in CLUSTER_SWEEP_OPTIONS or "." in key):
        raise CtdaError(f"--sweep {text!r}: with --cluster, KEY=V1,V2,... takes a cluster key "
                        "(SECTION.KEY, e.g. inter_host.bandwidth_gbps), allreduce or world-size")
    if not all(words):
        raise CtdaError(f"--sweep {text!r}: every value between the commas must be given")
    if len(words) > MAX_SWEEP_VALUES:
        raise CtdaError(f"--sweep {key}: {len(words):,} values; at most {MAX_SWEEP_VALUES} in one sweep")
    if CLUSTER_SWEEP_OPTIONS.get(key) is int:
        bad = [w for w in words if not w.lstrip("+-").isdigit()]
        if bad:
            raise CtdaError(f"--sweep {text!r}: values must be whole numbers, not {bad[0]!r}")
        return key, [int(w) for w in words]
    if key in CLUSTER_SWEEP_OPTIONS:
        return key, words
    return key, [_file_value(w) for w in words]


def _file_value(text: str):
    """A sweep value of a file key as TOML would read it: a whole number, a number, or a word."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
