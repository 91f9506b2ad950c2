"""The architecture, enforced: one import package `ctda_sql` whose layers only import down.

    ctda_sql.shell                      warehouse/shell/   the interactive shell
    ctda_sql.cli                        warehouse/cli/     the command line over the API
    ctda_sql.api                        warehouse/api.py
    ctda_sql.export                     the HTML report (with advice) and the overlay
    ctda_sql.advice                     advise and diff, over the what-if's replay
    ctda_sql.whatif
    ctda_sql.lake
    ctda_sql.engine | ctda_sql.ingest   independent of each other
    ctda_sql.core                       connection, transactions, SQL files, errors, ...
    ctda_sql.udfs                       udfs/
    ctda_sql.testing                    hand-made traces for tests and benchmarks; no layer imports it

Folders map to subpackages in one place, pyproject.toml's [tool.setuptools.package-dir].
import-linter cannot check this (it finds subpackages by walking the package's own folder,
and ctda_sql.udfs, .sql and .queries live in folders of their own), so the imports of every
module are read with ast, relative ones resolved, including imports inside functions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.modules import imported, package_modules

ROOT = Path(__file__).resolve().parents[2]
# top to bottom; a set holds layers that must not import each other
LAYERS = [{"shell"}, {"cli"}, {"api"}, {"export"}, {"advice"}, {"whatif"}, {"lake"}, {"engine", "ingest"}, {"core"}, {"udfs"}]
MAX_LINES = 500
# the folders that once were import names (and still are folders): never import by them
OLD_NAMES = {"warehouse", "ctda_shell", "udfs", "sql", "queries"}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def rank_of(layer: str) -> int:
    return next(i for i, group in enumerate(LAYERS) if layer in group)


def upward_imports() -> list[str]:
    modules = package_modules()
    broken = []
    for module, path in modules.items():
        own = layer_of(module)
        if own not in {layer for group in LAYERS for layer in group}:
            continue  # ctda_sql itself (the public API) and ctda_sql.testing
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
    offenders = [f"{module}: {name}" for module, path in package_modules().items()
                 for name in imported(module, path) if name.split(".")[0] in OLD_NAMES]
    assert offenders == []


def test_tests_benchmarks_and_scripts_import_the_package_by_its_name():
    """Folders are not import names: `from warehouse import ...` or `resources.files("warehouse")`
    works only from the repository's root, and not at all once installed."""
    offenders = []
    for path in sorted([*ROOT.glob("tests/*.py"), *ROOT.glob("bench/*.py"), *ROOT.glob("scripts/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            offenders += [f"{path.relative_to(ROOT).as_posix()}: {name}" for name in _names_imported_or_opened(node)
                          if name.split(".")[0] in OLD_NAMES]
    # run_checkout.py also runs checkouts older than the one package, whose shell was ctda_shell
    assert set(offenders) - {"bench/run_checkout.py: ctda_shell.entry"} == set()


def _names_imported_or_opened(node: ast.AST) -> list[str]:
    """The modules `node` imports (absolute imports only) or opens with `resources.files(...)`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and not node.level:
        return [node.module or ""]
    if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "files":
        return [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    return []


def private_imports() -> list[str]:
    """`from other_module import _name` and `other_module._name`: a name with `_` is its module's own."""
    modules = package_modules()
    found = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases = {}  # local name -> the ctda_sql module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(module, path, node)
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
                    elif _is_private(alias.name) and source != module:
                        found.append(f"{module} imports {source}.{alias.name}")
            elif isinstance(node, ast.Import):
                aliases |= {alias.asname: alias.name for alias in node.names if alias.asname and alias.name in modules}
        found += [f"{module} uses {aliases[node.value.id]}.{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in aliases and aliases[node.value.id] != module and _is_private(node.attr)]
    return sorted(set(found))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = (module if path.name == "__init__.py" else module.rpartition(".")[0]).split(".")
    return ".".join(package[:len(package) - (node.level - 1)] + ([node.module] if node.module else []))


def test_no_module_imports_another_modules_private_names():
    assert set(private_imports()) == set()


def test_no_layer_imports_the_testing_helpers():
    offenders = [f"{module} imports {name}" for module, path in package_modules().items()
                 if layer_of(module) in {layer for group in LAYERS for layer in group}
                 for name in imported(module, path) if name.startswith("ctda_sql.testing")]
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


def test_architecture_md_names_every_subpackage_and_public_table():
    """ARCHITECTURE.md is how a newcomer finds a module from its import path and a table from
    the stage that makes it: a subpackage or a schema table it leaves out fails here."""
    import re

    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    subpackages = {module for module, path in package_modules().items()
                   if path.name == "__init__.py" and module.count(".") == 1}
    schema = "\n".join(path.read_text(encoding="utf-8")
                       for path in [ROOT / "sql" / "schema.sql", *(ROOT / "sql" / "schema").glob("*.sql")])
    tables = set(re.findall(r"CREATE (?:OR REPLACE )?(?:TABLE|VIEW) (?:IF NOT EXISTS )?(\w+)", schema))
    assert {name for name in subpackages | tables if f"`{name}`" not in text} == set()
