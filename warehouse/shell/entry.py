"""Console entry point: the warehouse CLI, with this package's shell as the interactive mode."""

from __future__ import annotations

import functools
import signal
import sys


def _run_shell(args, commands: list[str] | None = None, mode: str | None = None) -> int:
    from ctda_sql.shell.app import run_shell

    return run_shell(args, commands, mode)


# options of the bare entry and of `shell` that take a value (the DuckDB flags are read around them)
_VALUED = ("--db", "--lake")


def duckdb_flags(argv: list[str]) -> tuple[list[str], list[str] | None, str | None]:
    """The DuckDB CLI's flags, on the bare entry or after `shell`: (argv without them, the SQL
    of each `-c SQL` or None, the mode of the last `-csv`, `-json`, `-line` ... or None). Any
    other command keeps its argv as it is, so argparse judges it."""
    from ctda_sql.core.config import FORMATS

    rest, commands, mode = [], None, None
    words = iter(argv)
    for word in words:
        if word == "-c":
            sql = next(words, None)
            if sql is None:
                return argv, None, None  # argparse's error names the flag
            commands = [*(commands or []), sql]
        elif word.startswith("-") and word[1:] in FORMATS:
            mode = word[1:]
        elif word in _VALUED:
            rest += [word, *[value for value in [next(words, None)] if value is not None]]
        elif not word.startswith("-") and word != "shell":
            return argv, None, None  # another command: not the DuckDB CLI's flags
        else:
            rest.append(word)
    return rest, commands, mode


def main(argv: list[str] | None = None) -> int:
    from ctda_sql.core.signals import sigint_deferred

    try:
        with sigint_deferred():  # Ctrl-C inside DuckDB's import would end in an ImportError
            from ctda_sql.cli.main import main as cli_main
            from ctda_sql.core.transaction import interrupted_message
    except KeyboardInterrupt:
        print("interrupted; the database is unchanged", file=sys.stderr)
        return 130

    # `ctda-sql shell --help` lists the dot commands from the same registry as `.help`; other
    # commands skip importing the shell (a report should open as fast as DuckDB allows)
    words = sys.argv[1:] if argv is None else argv
    words, commands, mode = duckdb_flags(words)
    shell = functools.partial(_run_shell, commands=commands, mode=mode)
    if "shell" in words:
        from ctda_sql.shell.commands import help_text

        shell.help_text = help_text()
    try:
        code = cli_main(words, shell=shell)
        _ignore_ctrl_c_from_now_on(argv)
    except KeyboardInterrupt as exc:  # in the instant between the command's end and the above
        _ignore_ctrl_c_from_now_on(argv)
        print(interrupted_message(exc), file=sys.stderr)
        return 130
    return code


def _ignore_ctrl_c_from_now_on(argv) -> None:
    """Run as the program (no argv) with the command done: a Ctrl-C while Python shuts down
    (releasing DuckDB) would end it silently with status -2 after a complete run."""
    if argv is None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
