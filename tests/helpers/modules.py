"""The package's modules and what each imports (tests/unit/test_layers.py, tests/unit/test_packaging.py)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def package_folders() -> dict[str, str]:
    """{folder: package}, as pyproject.toml maps them (the one place the mapping is written)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {folder: package for package, folder in pyproject["tool"]["setuptools"]["package-dir"].items()}


def package_modules() -> dict[str, Path]:
    """Every module of ctda_sql by its dotted name."""
    modules = {}
    for folder, package in package_folders().items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def imported(module: str, path: Path) -> set[str]:
    """The absolute names `module` imports (at any depth of its code)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names.add(target)
            names |= {f"{target}.{alias.name}" for alias in node.names}
    return names


def package_sql_files(package: str) -> list[str]:
    """Every .sql file of the installed `package` (e.g. ctda_sql.sql), as 'folder/name.sql'
    relative to it, sorted (tests/unit/test_sql_files.py, tests/unit/test_statement_length.py)."""
    from importlib import resources

    def walk(folder, prefix: str) -> list[str]:
        found = []
        for entry in folder.iterdir():
            if entry.is_dir() and not entry.name.startswith("__"):
                found += walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith(".sql"):
                found.append(prefix + entry.name)
        return found

    return sorted(walk(resources.files(package), ""))
