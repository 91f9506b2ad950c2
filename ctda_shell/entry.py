"""Console entry point: the warehouse CLI, with this package's shell as the interactive mode."""

from __future__ import annotations

import sys


def _run_shell(args) -> int:
    from .app import run_shell

    return run_shell(args)


def main(argv: list[str] | None = None) -> int:
    from warehouse.signals import sigint_deferred

    try:
        with sigint_deferred():  # Ctrl-C inside DuckDB's import would end in an ImportError
            from warehouse.cli import main as cli_main

            from .commands import help_text
    except KeyboardInterrupt:
        print("interrupted; the database is unchanged", file=sys.stderr)
        return 130

    # `ctda-sql shell --help` lists the dot commands from the same registry as `.help`
    _run_shell.help_text = help_text()
    return cli_main(argv, shell=_run_shell)


if __name__ == "__main__":
    sys.exit(main())
