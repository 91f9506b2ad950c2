"""Run the ctda-sql CLI of another checkout (before/after benchmarks): `python
bench/run_checkout.py CHECKOUT ARGS...`. A checkout of the one-package layout (issue 36) is
imported as its own pyproject.toml's package-dir maps it; an older one from its top-level packages."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import tomllib
from pathlib import Path


def package_dirs(root: Path) -> dict[str, str]:
    """The checkout's [tool.setuptools.package-dir]: {package: folder} (the layout changed
    between checkouts: ctda_sql.shell was once ctda_shell/)."""
    pyproject = tomllib.loads((Path(root) / "pyproject.toml").read_text(encoding="utf-8"))
    return pyproject["tool"]["setuptools"]["package-dir"]


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ctda_sql and its mapped subpackages in one checkout, before any installed copy."""

    def __init__(self, root: Path):
        self.root = root
        self.package_dirs = package_dirs(root)

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.package_dirs:
            folder = self.root / self.package_dirs[fullname]
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
