"""Run the ctda-sql CLI of another checkout (before/after benchmarks): `python
bench/run_checkout.py CHECKOUT ARGS...`. A checkout of the one-package layout (issue 36) is
imported as pyproject.toml's package-dir maps it; an older one from its top-level packages."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

# pyproject.toml's [tool.setuptools.package-dir]
PACKAGE_DIRS = {"ctda_sql": "warehouse", "ctda_sql.udfs": "udfs", "ctda_sql.shell": "ctda_shell",
                "ctda_sql.sql": "sql", "ctda_sql.queries": "queries"}


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ctda_sql and its mapped subpackages in one checkout, before any installed copy."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if fullname in PACKAGE_DIRS:
            folder = self.root / PACKAGE_DIRS[fullname]
            return importlib.util.spec_from_file_location(fullname, folder / "__init__.py",
                                                          submodule_search_locations=[str(folder)])
        return None


def is_one_package(root: Path) -> bool:
    return (Path(root) / "warehouse" / "cli").is_dir()


def use_checkout(root: Path) -> None:
    """Import ctda_sql from the checkout `root` in this process, before the installed one (a
    path on sys.path cannot do it: the package is mapped from several folders)."""
    root = Path(root).resolve()
    if not is_one_package(root):
        sys.exit(f"{root} predates the one-package layout (issue 36): run that checkout's own copy of this script")
    sys.meta_path.insert(0, CheckoutFinder(root))


def main() -> int:
    root = Path(sys.argv.pop(1)).resolve()
    if is_one_package(root):
        use_checkout(root)
        from ctda_sql.shell.entry import main as cli_main
    else:
        sys.path.insert(0, str(root))
        from ctda_shell.entry import main as cli_main
    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
