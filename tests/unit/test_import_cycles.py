"""No two modules of ``driver/`` or ``cdi/`` import each other, directly or around a longer loop.

The layer contract (pyproject.toml) orders packages, not the modules inside one package, and not a
package's ``__init__`` against its own modules: ``cdi/spec.py`` and ``cdi/version.py`` once imported
each other, as did ``driver/state/journal.py`` and ``driver/state/evidence.py``, with the contract
kept. This test walks every import of every module and fails on any cycle.

Three kinds of import count, and the failure names the kind of each edge of a cycle:

* at module level;
* inside a function: it runs, only later, so a lazy import that closes a cycle hides it and does
  not remove it;
* under ``if TYPE_CHECKING:``: it never runs, but the two modules still cannot be read, typed or
  moved apart one without the other.

The first test counts the imports that run (the first two kinds); the second adds the typing-only
ones, so a red run says at once whether Python itself would meet the cycle. The planted trees below
prove each kind is caught.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("driver", "cdi")

RUNTIME = frozenset({"module level", "in a function"})
ANY = RUNTIME | {"TYPE_CHECKING"}


@dataclass(frozen=True, slots=True)
class Edge:
    importer: str
    imported: str
    kind: str  # "module level", "in a function" or "TYPE_CHECKING"
    line: int

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} ({self.kind}, line {self.line})"


def _modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module and package under the root's packages."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, kind: str = "module level") -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement with its kind: under ``if TYPE_CHECKING``, in a function, or neither."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, kind
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), "TYPE_CHECKING")
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), kind)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _imports(node, "in a function" if kind == "module level" else kind)
        else:
            yield from _imports(node, kind)


def _targets(node: ast.Import | ast.ImportFrom, package: str, modules: dict[str, Path]) -> list[str]:
    """The modules of the tree an import statement loads: ``from p import m`` names module ``p.m``
    when there is one, else package ``p``; ``import a.b.c`` names the deepest module that exists.
    The parent packages Python loads on the way are not edges (every child would close a cycle
    with a parent that imports it)."""
    if isinstance(node, ast.Import):
        candidates = [[alias.name] for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        candidates = [[f"{base}.{alias.name}", base] for alias in node.names]
    found: list[str] = []
    for names in candidates:
        for name in names:
            module = name
            while module and module not in modules:
                module = module.rpartition(".")[0]
            if module:
                found.append(module)
                break
    return found


def import_edges(root: Path) -> list[Edge]:
    """Every import from one module of the tree to another, with its kind and line."""
    modules = _modules(root)
    edges: list[Edge] = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, kind in _imports(ast.parse(path.read_text(), str(path))):
            for target in dict.fromkeys(_targets(node, package, modules)):
                if target != name:
                    edges.append(Edge(name, target, kind, node.lineno))
    return edges


def import_cycles(root: Path, kinds: frozenset[str]) -> list[list[Edge]]:
    """The import cycles among the tree's modules counting only imports of ``kinds``: one list of
    edges per strongly connected set of modules (Tarjan), empty when the graph is acyclic."""
    edges = [e for e in import_edges(root) if e.kind in kinds]
    graph: dict[str, list[str]] = {}
    for e in edges:
        graph.setdefault(e.importer, []).append(e.imported)
        graph.setdefault(e.imported, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [
        sorted((e for e in edges if e.importer in c and e.imported in c), key=str)
        for c in sorted(components, key=sorted)
    ]


def _report(cycles: list[list[Edge]]) -> str:
    return "\n\n".join("\n".join(map(str, cycle)) for cycle in cycles)


def test_no_import_cycle_among_the_imports_that_run() -> None:
    cycles = import_cycles(REPO, RUNTIME)
    assert not cycles, "import cycles (move what both need below both):\n" + _report(cycles)


def test_no_import_cycle_even_through_type_checking_imports() -> None:
    cycles = import_cycles(REPO, ANY)
    assert not cycles, "import cycles (move what both need below both):\n" + _report(cycles)


def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()
    return root


def test_a_cycle_closed_by_an_import_in_a_function_is_found(tmp_path: Path) -> None:
    """The shape cdi/spec.py and cdi/version.py had."""
    root = _plant(
        tmp_path,
        {
            "cdi/spec.py": "def to_json():\n    from cdi.version import rank\n    return rank()\n",
            "cdi/version.py": "from cdi.spec import to_json\n\ndef rank():\n    return 0\n",
        },
    )
    assert [[str(e) for e in c] for c in import_cycles(root, RUNTIME)] == [
        [
            "cdi.spec -> cdi.version (in a function, line 2)",
            "cdi.version -> cdi.spec (module level, line 1)",
        ]
    ]


def test_a_cycle_through_type_checking_is_found_only_when_those_count(tmp_path: Path) -> None:
    """The shape driver/state/journal.py and evidence.py had, with a relative import."""
    root = _plant(
        tmp_path,
        {
            "driver/state/__init__.py": "",
            "driver/state/journal.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .evidence import Evidence\n"
            ),
            "driver/state/evidence.py": "from driver.state.journal import Entry\n",
        },
    )
    assert import_cycles(root, RUNTIME) == []
    assert [[str(e) for e in c] for c in import_cycles(root, ANY)] == [
        [
            "driver.state.evidence -> driver.state.journal (module level, line 1)",
            "driver.state.journal -> driver.state.evidence (TYPE_CHECKING, line 4)",
        ]
    ]


def test_a_longer_cycle_across_packages_and_a_package_init_is_found(tmp_path: Path) -> None:
    """A loop of three through a package's ``__init__``, which no layer contract sees."""
    root = _plant(
        tmp_path,
        {
            "driver/inventory/__init__.py": "from driver.inventory.model import Inventory\n",
            "driver/inventory/model.py": "import driver.names\n",
            "driver/names.py": "from driver.inventory import Inventory\n",
        },
    )
    (cycle,) = import_cycles(root, RUNTIME)
    assert {(e.importer, e.imported) for e in cycle} == {
        ("driver.inventory", "driver.inventory.model"),
        ("driver.inventory.model", "driver.names"),
        ("driver.names", "driver.inventory"),
    }


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({"driver/a.py": "import driver.b\n", "driver/b.py": "import json\n"}, id="one-way"),
        pytest.param(
            {"driver/p/__init__.py": "from driver.p.m import f\n", "driver/p/m.py": "f = 1\n"},
            id="package-reexports-its-module",
        ),
        pytest.param(
            {
                "driver/p/__init__.py": "",
                "driver/p/m.py": "f = 1\n",
                "driver/p/n.py": "from driver.p import m\n",
            },
            id="from-package-import-module",
        ),
    ],
)
def test_imports_that_point_one_way_are_no_cycle(tmp_path: Path, files: dict[str, str]) -> None:
    assert import_cycles(_plant(tmp_path, files), ANY) == []
