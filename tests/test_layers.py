"""Layers: ctda_shell sits on warehouse, warehouse on udfs; never the other way round."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_import_linter_contract_is_kept():
    # beside this interpreter first: a venv's python run without activating the venv
    beside = Path(sys.executable).parent / "lint-imports"
    command = str(beside) if beside.exists() else shutil.which("lint-imports")
    if command is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    result = subprocess.run([command, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.lower().replace("0 broken", "")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", ["warehouse", "udfs"])
def test_lower_layers_never_import_the_shell(package):
    # also catches imports inside functions, which some linters treat more leniently
    offenders = [str(path.relative_to(ROOT)) for path in sorted((ROOT / package).rglob("*.py"))
                 if any(name.split(".")[0] == "ctda_shell" for name in imported_modules(path))]
    assert offenders == []


def test_udfs_never_import_the_warehouse():
    offenders = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "udfs").rglob("*.py"))
                 if any(name.split(".")[0] == "warehouse" for name in imported_modules(path))]
    assert offenders == []


def test_importing_the_warehouse_cli_does_not_load_the_shell():
    code = "import sys, warehouse.cli; print(any(m.startswith('ctda_shell') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
