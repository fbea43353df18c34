"""The layer contract in pyproject.toml (``[tool.importlinter]``) holds: imports only point down.

``lint-imports`` is the import-linter CLI; ``make lint`` runs it too. The second test proves the
check can fail: a module planted in a low layer that imports a high one breaks the contract.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: install the test extras (pip install -e '.[test]')")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_layer_contract_is_kept() -> None:
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    """A copy of the packages where the inventory (low) imports the kubelet layer (high)."""
    for name in ("driver", "cdi"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "driver" / "inventory" / "upward.py").write_text("import driver.kubelet.server\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout and "driver.inventory.upward -> driver.kubelet.server" in done.stdout


def _private_imports_across_packages(root: Path) -> list[str]:
    """``driver.x.y imports driver.<layer>.<...>._<name>`` for every import of something private
    to a layer (a private module, or a private name of one of its modules) from outside it."""
    import ast

    found: list[str] = []
    for path in sorted((root / "driver").rglob("*.py")):
        importer = ".".join(path.relative_to(root).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                parts = name.split(".")
                private = next((i for i, part in enumerate(parts) if i >= 2 and part.startswith("_")), None)
                if parts[0] != "driver" or private is None:
                    continue
                package = ".".join(parts[:2])  # driver.<layer>: its modules share its privates
                if not importer.startswith(package + "."):
                    found.append(f"{importer} imports {name}")
    return found


def test_no_package_reaches_into_another_packages_private_modules() -> None:
    """What several layers use is public (``driver.inventory.sysfs``, not ``_sysfs``): a private
    module is its package's own business, so it can change without breaking another layer."""
    assert _private_imports_across_packages(REPO) == []


def test_a_private_import_across_packages_is_found(tmp_path: Path) -> None:
    (tmp_path / "driver" / "inventory").mkdir(parents=True)
    (tmp_path / "driver" / "health").mkdir()
    (tmp_path / "driver" / "inventory" / "_helper.py").write_text("X = 1\n")
    (tmp_path / "driver" / "inventory" / "own.py").write_text("from driver.inventory._helper import X\n")
    (tmp_path / "driver" / "health" / "user.py").write_text("from driver.inventory._helper import X\n")
    assert _private_imports_across_packages(tmp_path) == [
        "driver.health.user imports driver.inventory._helper",
        "driver.health.user imports driver.inventory._helper.X",
    ]
