"""The options of `ingest` and `analyze`, defined once for the CLI subcommands and the shell's
`.ingest` / `.analyze`, so both accept the same flags with the same help."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from ctda_sql.core.errors import CtdaError


@dataclass(frozen=True)
class Option:
    flag: str
    help: str
    metavar: str | None = None  # None: a switch that takes no value
    type: type = str
    repeat: bool = False
    choices: tuple[str, ...] | None = None
    default: object = None

    def usage(self) -> str:
        if self.metavar is None:
            return f"[{self.flag}]"
        return f"[{self.flag} {self.metavar}]" + ("..." if self.repeat else "")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.metavar is None:
            parser.add_argument(self.flag, action="store_true", help=self.help)
            return
        parser.add_argument(self.flag, metavar=self.metavar, type=self.type, choices=self.choices,
                            default=self.default, action="append" if self.repeat else "store",
                            help=self.help)


INGEST_OPTIONS = (
    Option("--run", "run name (default: the folder or file name)", "NAME"),
    Option("--meta", "experiment metadata stored in runs.meta (repeatable)", "KEY=VALUE", repeat=True),
    Option("--replace", "re-load files already in the warehouse"),
    Option("--analyze", "then analyse the run in the same command, as `analyze --run NAME` does, with the "
           "options below; the load is kept if the analysis fails or is stopped"),
)

ANALYZE_METHODS = ("all", "ctda", "per_thread", "cross_rank")
ANALYZE_OPTIONS = (
    Option("--run", "run name (default: all runs)", "NAME"),
    Option("--method", "ctda links the main and autograd threads; per_thread keeps them apart; cross_rank follows "
           "collectives into the rank that gated them (default: all)",
           "|".join(ANALYZE_METHODS), choices=ANALYZE_METHODS, default="all"),
    Option("--window", "analyse every annotation whose name starts with PREFIX instead of ProfilerStep",
           "PREFIX"),
    Option("--no-split-starved", "keep one GPU node per CPU node and stream, as the method's paper does, "
           "instead of splitting it where the GPU sat idle waiting for a launch"),
    Option("--wait-gap-us", "a fixed hand-off tolerance: a kernel that sat past its launch and stream "
           "predecessor waited for work on another stream that ended within N us before it started "
           "(default: adaptive, a tenth of the wait within 15-100 us; measured in docs/method.md)",
           "N", type=float),
)


# ingest --analyze takes analyze's options too (not --run: ingest's names the run it loads)
INGEST_OPTIONS += tuple(
    replace(option, help=f"with --analyze: {option.help}", default=None)
    for option in ANALYZE_OPTIONS if option.flag != "--run")
_INGEST_ANALYSIS_FLAGS = ("method", "window", "wait_gap_us", "no_split_starved")


def ingest_analysis(args: argparse.Namespace) -> dict | None:
    """The keyword arguments of Warehouse.analyze for `ingest --analyze` (checked before the
    load starts), or None without --analyze; analyze's options without it are an error."""
    if not args.analyze:
        given = [flag for flag in _INGEST_ANALYSIS_FLAGS if getattr(args, flag) not in (None, False)]
        if given:
            shown = ", ".join("--" + flag.replace("_", "-") for flag in given)
            raise CtdaError(f"{shown} only apply with --analyze")
        return None
    settings = analysis_settings(args)
    return {"method": args.method or "all", "window": args.window, "wait_gap_us": settings.wait_gap_us,
            "split_starved": settings.split_starved}


def add_options(parser: argparse.ArgumentParser, options: tuple[Option, ...]) -> None:
    for option in options:
        option.add_to(parser)


def usage(options: tuple[Option, ...]) -> str:
    return " ".join(option.usage() for option in options)


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message):
        raise CtdaError(f"{message}; usage: {self.usage}")


def command_parser(name: str, options: tuple[Option, ...], positional: str | None = None) -> argparse.ArgumentParser:
    """A parser for a dot command that raises CtdaError (one line) instead of exiting."""
    usage_line = f"{name} {positional + ' ' if positional else ''}{usage(options)}"
    parser = _RaisingParser(prog=name, usage=usage_line, add_help=False, exit_on_error=False)
    if positional:
        parser.add_argument("paths", nargs="+", metavar=positional.rstrip("."))
    add_options(parser, options)
    return parser


def analysis_settings(args: argparse.Namespace):
    """The engine's settings from parsed ANALYZE_OPTIONS (CLI or shell)."""
    from ctda_sql.engine.analyze import analysis_settings

    return analysis_settings(args.wait_gap_us, split_starved=not args.no_split_starved,
                             wait_gap_option="--wait-gap-us")
