"""Console entry point: the warehouse CLI, with this package's shell as the interactive mode."""

from __future__ import annotations

import signal
import sys


def _run_shell(args) -> int:
    from ctda_sql.shell.app import run_shell

    return run_shell(args)


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
    if "shell" in (sys.argv[1:] if argv is None else argv):
        from ctda_sql.shell.commands import help_text

        _run_shell.help_text = help_text()
    try:
        code = cli_main(argv, shell=_run_shell)
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
