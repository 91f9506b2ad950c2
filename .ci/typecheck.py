"""Type-check the core layers with mypy (settings: pyproject.toml [tool.mypy]).

mypy finds modules by folder, and ctda_sql's subpackages live in folders of other names
(pyproject's [tool.setuptools.package-dir]: warehouse/ is ctda_sql, udfs/ is ctda_sql.udfs).
So mypy reads a temporary tree of links laid out as the package imports, and its messages
name the repository's files again."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def link_package(tree: Path) -> None:
    """tree/ctda_sql/... as `import ctda_sql...` sees it: each package-dir entry linked in place."""
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top = tree / "ctda_sql"
    top.mkdir()
    for entry in (ROOT / folders["ctda_sql"]).iterdir():
        (top / entry.name).symlink_to(entry)
    for package, folder in folders.items():
        if package != "ctda_sql" and (ROOT / folder).is_dir():
            link = tree.joinpath(*package.split("."))
            if not link.exists():
                link.symlink_to(ROOT / folder)


def repository_paths(text: str, tree: Path) -> str:
    """mypy's `ctda_sql/core/x.py:3: error` lines with the file's path in the repository."""
    lines = []
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if sep and name.endswith(".py") and (tree / name).exists():
            name = str((tree / name).resolve().relative_to(ROOT))
        lines.append(name + sep + rest)
    return "\n".join(lines)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="ctda-mypy-") as folder:
        tree = Path(folder)
        link_package(tree)
        done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                               "--cache-dir", str(Path(tempfile.gettempdir()) / "ctda-sql-mypy-cache"), *sys.argv[1:]],
                              cwd=tree, env={**os.environ, "MYPYPATH": str(tree)},
                              capture_output=True, text=True)
        print(repository_paths(done.stdout + done.stderr, tree))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
