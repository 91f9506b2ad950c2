"""`ctda-sql advise` (what to fix first, and what it buys) and `ctda-sql diff` (why one run's
step differs from another's), over ctda_sql.advice."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from ctda_sql.cli.output import FORMATS, add_max_width, render, table_width
from ctda_sql.core.errors import CtdaError

FINDING_COLUMNS = ["place", "rule", "saving_us", "saving_share", "path_us", "fix", "scenario"]
PROFILE_COLUMNS = ["kind", "label", "rank", "path_us", "saving_at_half_us", "saving_at_zero_us"]
DIFF_COLUMNS = ["kind", "label", "a_us", "b_us", "delta_us"]


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "advise", help="what to fix first, and what the replay predicts it buys",
        description="Find the patterns that cost step time on the critical path (data loading, host syncs, "
                    "pageable copies, launch-bound steps, exposed communication, a straggler rank, pipeline "
                    "bubbles, the optimizer, unexplained device idle), each with a fix and the saving the "
                    "what-if replay predicts for it (the median over steps), ranked by that saving; then the "
                    "causal profile: what the path's largest regions would buy at half and at zero time. "
                    "Stores the run's advice in advice_findings and advice_profile (report advice). "
                    "docs/advice.md explains each rule.")
    _db_option(p)
    p.add_argument("--run", help="run name (needed when the warehouse holds several)")
    p.add_argument("--rank", type=int, help="only this rank's steps (a multi-rank run still replays every rank)")
    p.add_argument("--step", type=int, help="only this step")
    p.add_argument("--top", type=int, default=10, help="findings to show (default 10)")
    p.add_argument("--profile-top", type=int, default=10,
                   help="regions in the causal profile (default 10): each one's path time beside the replay's "
                        "saving at zero, step by step, with the slack named where they disagree (JSON: per_step)")
    p.add_argument("--format", choices=FORMATS, default="table", help="table (default) or one JSON document with json")
    add_max_width(p)
    p.set_defaults(handler=cmd_advise)

    p = sub.add_parser(
        "diff", help="why one run's step is slower or faster than another's, along the critical paths",
        description="Decompose the difference of two runs' median steps along their critical paths by region "
                    "(annotation, op, kernel, rank): what appeared, vanished, grew or shrank. The rows and the "
                    "named unexplained remainder sum exactly to the measured difference.")
    _db_option(p)
    p.add_argument("--run-a", required=True, help="the run to compare against (the baseline)")
    p.add_argument("--run-b", required=True, help="the run to explain")
    p.add_argument("--rank", type=int, help="compare this rank only (default: the job's step)")
    p.add_argument("--format", choices=FORMATS, default="table", help="table (default) or one JSON document with json")
    add_max_width(p)
    p.set_defaults(handler=cmd_diff)


def _db_option(parser) -> None:
    # accepted after the command too: `ctda-sql advise --db x.duckdb ...`
    parser.add_argument("--db", default=argparse.SUPPRESS, help="database file")


def _warehouse(args):
    from ctda_sql.api import Warehouse
    from ctda_sql.core.connection import existing_db_path

    return Warehouse(existing_db_path(args.db))


def cmd_advise(args) -> int:
    with _warehouse(args) as wh:
        document = wh.advise(run=args.run, rank=args.rank, step=args.step, top=args.top,
                             profile_top=args.profile_top)
    document.pop("run_id", None)
    if args.format == "json":
        print(json.dumps(document, indent=1))
        return 0
    print(format_advice(document, args.format, _width(args)))
    return 0


def format_advice(document: dict, fmt: str = "table", width: int | None = None) -> str:
    """The advice as two tables (findings, profile) with a line above each; the shell and the
    demo print it too."""
    (_, findings), (_, profile) = advice_tables(document)
    step = document["step_us"]
    heading = (f"advice for run {document['run']!r}: median step {step / 1000:.2f} ms over {document['steps']} "
               f"steps; savings are the replay's, the median over steps" if step else
               f"advice for run {document['run']!r}")
    lines = [_fill(heading, width), render(FINDING_COLUMNS, findings, fmt, width)]
    for i, f in enumerate(document["findings"], start=1):
        if fmt == "table":
            lines.append(_fill(f"{i}. {f['title']}: {f['evidence']}", width))
    lines += [_fill("causal profile: the predicted saving per step if each region took half its time, "
                    "or none", width), render(PROFILE_COLUMNS, profile, fmt, width)]
    if fmt == "table":  # why a region's saving at zero differs from its path time (per_step in json)
        lines += [_fill(f"{p['kind']} {p['label']}: {p['note']}", width) for p in document["profile"] if p.get("note")]
    return "\n".join(lines)


def advice_tables(document: dict) -> list[tuple[list[str], list[tuple]]]:
    """The advice document as two tables: the findings, numbered, and the causal profile."""
    findings = [(i, f["rule"], f["saving_us"], f["saving_share"], f["path_us"], f["fix"], f["scenario"])
                for i, f in enumerate(document["findings"], start=1)]
    profile = [(p["kind"], p["label"], p["rank"], p["path_us"], p["saving_at_half_us"], p["saving_at_zero_us"])
               for p in document["profile"]]
    return [(FINDING_COLUMNS, findings), (PROFILE_COLUMNS, profile)]


def diff_rows(document: dict) -> list[tuple]:
    """The diff's rows, then its unexplained remainder as the last row (they sum to delta_us)."""
    rows = [(r["kind"], r["label"], r["a_us"], r["b_us"], r["delta_us"]) for r in document["rows"]]
    rows.append(("remainder", "unexplained (off the path: gaps, slack)", None, None, document["unexplained_us"]))
    return rows


def cmd_diff(args) -> int:
    with _warehouse(args) as wh:
        document = wh.diff(args.run_a, args.run_b, rank=args.rank)
    if args.format == "json":
        print(json.dumps(document, indent=1))
        return 0
    width = _width(args)
    rows = diff_rows(document)
    print(_fill(f"{document['run_b']!r} vs {document['run_a']!r}: median step {document['step_b_us'] / 1000:.2f} ms "
                f"vs {document['step_a_us'] / 1000:.2f} ms, delta {document['delta_us'] / 1000:+.2f} ms", width))
    print(render(DIFF_COLUMNS, rows, args.format, width))
    return 0


def _width(args) -> int | None:
    from ctda_sql.core.config import load_config

    return table_width(sys.stdout, args.max_width if args.max_width is not None else load_config().max_width)


def _fill(text: str, width: int | None) -> str:
    return textwrap.fill(text, width) if width else text




class _ShellParser(argparse.ArgumentParser):
    """Raises instead of exiting, so the shell shows the message as one error line."""

    def error(self, message):
        raise CtdaError(f"{self.prog}: {message}")


def shell_advise(con, words: list[str]) -> list[tuple[list[str], list[tuple]]]:
    """.advise in the shell: the findings and the profile as two tables."""
    from ctda_sql.advice.advise import advise

    parser = _ShellParser(prog=".advise", add_help=False)
    for flag, kind in (("--run", str), ("--rank", int), ("--step", int), ("--top", int), ("--profile-top", int)):
        parser.add_argument(flag, type=kind)
    args = parser.parse_args(words)
    document = advise(con, run=args.run, rank=args.rank, step=args.step, top=10 if args.top is None else args.top,
                      profile_top=10 if args.profile_top is None else args.profile_top)
    return advice_tables(document)


def shell_diff(con, words: list[str]) -> list[tuple[list[str], list[tuple]]]:
    """.diff in the shell: the rows and the unexplained remainder as one table."""
    from ctda_sql.advice.diff import diff

    parser = _ShellParser(prog=".diff", add_help=False)
    parser.add_argument("--run-a", required=True)
    parser.add_argument("--run-b", required=True)
    parser.add_argument("--rank", type=int)
    args = parser.parse_args(words)
    document = diff(con, args.run_a, args.run_b, rank=args.rank)
    return [(DIFF_COLUMNS, diff_rows(document))]
