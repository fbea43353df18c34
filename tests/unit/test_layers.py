"""The layer contract in pyproject.toml (``[tool.importlinter]``) holds: imports only point down.

``lint-imports`` is the import-linter CLI; ``make lint`` runs it too. The second test proves the
check can fail: a module planted in a low layer that imports a high one breaks the contract.

The contract cannot see names: the tests after it hold every module to its own ``_private`` names,
across layers and inside one package alike, each proven on a planted tree.
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


def _private_imports(root: Path) -> list[str]:
    """``a.b imports c.d._e`` for every import, in ``driver/`` and ``cdi/``, of something private
    to another module or package.

    A ``_name`` defined in a module is that module's own: no other module imports it. A private
    module or package (``driver.cli._x``, ``driver._proto``) belongs to the package holding it:
    that package's modules (at any depth) may import it, no one else.
    """
    import ast

    modules: dict[str, Path] = {}
    for top in ("driver", "cdi"):
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    found: list[str] = []
    for importer, path in modules.items():
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] not in ("driver", "cdi"):
                    continue
                private = next(
                    (
                        i
                        for i, part in enumerate(parts)
                        if i and part.startswith("_") and not part.endswith("__")
                    ),
                    None,
                )
                if private is None:
                    continue
                owner = ".".join(parts[:private])  # the package or module the private thing is in
                if ".".join(parts[: private + 1]) in modules:  # a private module: its package's own
                    allowed = importer == owner or importer.startswith(owner + ".")
                else:  # a private name of a module: that module's own
                    allowed = importer == owner
                if not allowed:
                    found.append(f"{importer} imports {name}")
    return sorted(found)


def test_no_package_reaches_into_another_packages_private_modules() -> None:
    """What several layers use is public (``driver.inventory.sysfs``, not ``_sysfs``): a private
    module is its package's own business, so it can change without breaking another layer."""
    assert _private_imports(REPO) == []


def test_a_private_import_across_packages_is_found(tmp_path: Path) -> None:
    (tmp_path / "driver" / "inventory").mkdir(parents=True)
    (tmp_path / "driver" / "health").mkdir()
    (tmp_path / "driver" / "inventory" / "_helper.py").write_text("X = 1\n")
    (tmp_path / "driver" / "inventory" / "own.py").write_text("from driver.inventory._helper import X\n")
    (tmp_path / "driver" / "health" / "user.py").write_text("from driver.inventory._helper import X\n")
    assert _private_imports(tmp_path) == [
        "driver.health.user imports driver.inventory._helper",
        "driver.health.user imports driver.inventory._helper.X",
    ]


def test_a_private_name_of_another_module_is_found(tmp_path: Path) -> None:
    """The shape svg.py and table.py had: one module of a package reaching into a sibling's
    private helper, which the layer check above let through (same package)."""
    (tmp_path / "driver" / "inventory").mkdir(parents=True)
    (tmp_path / "cdi").mkdir()
    (tmp_path / "driver" / "inventory" / "table.py").write_text("def _size(v):\n    return v\n")
    (tmp_path / "driver" / "inventory" / "svg.py").write_text("from driver.inventory.table import _size\n")
    (tmp_path / "driver" / "inventory" / "relative.py").write_text("from .table import _size\n")
    (tmp_path / "cdi" / "spec.py").write_text("_RANK = {}\n")
    (tmp_path / "cdi" / "io.py").write_text("from cdi.spec import _RANK\n")
    assert _private_imports(tmp_path) == [
        "cdi.io imports cdi.spec._RANK",
        "driver.inventory.relative imports driver.inventory.table._size",
        "driver.inventory.svg imports driver.inventory.table._size",
    ]


def test_a_private_module_is_its_packages_own(tmp_path: Path) -> None:
    """``driver.cli._x`` serves ``driver.cli`` (at any depth), ``driver._proto`` all of
    ``driver``; a module of a sibling package may use neither's private modules."""
    for folder in ("driver/cli/sub", "driver/_proto", "driver/state", "cdi"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    (tmp_path / "driver" / "cli" / "_glue.py").write_text("X = 1\n")
    (tmp_path / "driver" / "_proto" / "__init__.py").touch()
    (tmp_path / "driver" / "_proto" / "dra_pb2.py").write_text("X = 1\n")
    (tmp_path / "driver" / "cli" / "state.py").write_text("from driver.cli._glue import X\n")
    (tmp_path / "driver" / "cli" / "sub" / "deep.py").write_text("import driver.cli._glue\n")
    (tmp_path / "driver" / "state" / "user.py").write_text(
        "from driver._proto import dra_pb2\nfrom driver.cli import _glue\n"
    )
    (tmp_path / "cdi" / "outside.py").write_text("import driver._proto.dra_pb2\n")
    assert _private_imports(tmp_path) == [
        "cdi.outside imports driver._proto.dra_pb2",
        "driver.state.user imports driver.cli._glue",
    ]
