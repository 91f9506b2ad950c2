"""The architecture, enforced: one import package `ctda_sql` whose layers only import down.

    ctda_sql.shell                      ctda_shell/    the interactive shell
    ctda_sql.cli                        warehouse/cli/ the command line over the API
    ctda_sql.api                        warehouse/api.py
    ctda_sql.export                     the HTML report (with advice) and the overlay
    ctda_sql.advice                     advise and diff, over the what-if's replay
    ctda_sql.whatif
    ctda_sql.lake
    ctda_sql.engine | ctda_sql.ingest   independent of each other
    ctda_sql.core                       connection, transactions, SQL files, errors, ...
    ctda_sql.udfs                       udfs/

import-linter cannot check this (it finds subpackages by walking the package's own folder,
and ctda_sql.shell, .udfs, .sql and .queries live in folders of their own), so the imports of
every module are read with ast, relative ones resolved, including imports inside functions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# top to bottom; a set holds layers that must not import each other
LAYERS = [{"shell"}, {"cli"}, {"api"}, {"export"}, {"advice"}, {"whatif"}, {"lake"}, {"engine", "ingest"}, {"core"}, {"udfs"}]
FOLDERS = {"warehouse": "ctda_sql", "ctda_shell": "ctda_sql.shell", "udfs": "ctda_sql.udfs"}
MAX_LINES = 500


def package_modules() -> dict[str, Path]:
    """Every module of ctda_sql by its dotted name."""
    modules = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if folder == "warehouse" and parts and parts[0] in ("shell", "udfs"):
                continue
            modules[".".join([package, *parts])] = path
    return modules


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def rank_of(layer: str) -> int:
    return next(i for i, group in enumerate(LAYERS) if layer in group)


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


def upward_imports() -> list[str]:
    modules = package_modules()
    broken = []
    for module, path in modules.items():
        own = layer_of(module)
        if own not in {layer for group in LAYERS for layer in group}:
            continue  # ctda_sql itself (the public API) and ctda_sql.tracebuilder
        for name in imported(module, path):
            target = layer_of(name) if name.startswith("ctda_sql.") else None
            if target is None or target == own or name not in modules:
                continue
            if target not in {layer for group in LAYERS for layer in group} or rank_of(target) <= rank_of(own):
                broken.append(f"{module} imports {name}")
    return sorted(broken)


def test_every_import_goes_down_a_layer():
    assert upward_imports() == []


def test_nothing_imports_the_old_top_level_names():
    old = ("warehouse", "udfs", "ctda_shell", "sql", "queries")
    offenders = [f"{module}: {name}" for module, path in package_modules().items()
                 for name in imported(module, path) if name.split(".")[0] in old]
    assert offenders == []


def test_no_module_is_over_500_lines():
    long = {module: n for module, path in package_modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_importing_the_cli_does_not_load_the_shell(tmp_path):
    code = "import sys, ctda_sql.cli.main; print(any(m.startswith('ctda_sql.shell') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.parametrize("layer", ["shell", "cli", "api", "export", "whatif", "lake", "engine", "ingest", "core", "udfs"])
def test_each_layer_exists(layer):
    assert any(layer_of(module) == layer for module in package_modules())
