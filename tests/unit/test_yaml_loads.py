"""Every YAML document ``driver/`` and ``cdi/`` parse goes through :mod:`driver.untrusted.yamldoc`.

PyYAML's loaders, the safe one included, expand aliases: a file of a hundred KiB can stand for
millions of nodes. The primitive refuses aliases and bounds nesting and node count; this scan
(AST) fails on any other call that parses YAML (``yaml.load``, ``safe_load``, ``load_all``,
``compose``, ``parse``, ``scan``, a loader class built by hand) or a name imported from ``yaml``
for that, so a later parse cannot skip the primitive. The second test plants such calls in a
copy of the tree and shows the scan catches them. Dumping YAML (``safe_dump``) is not a parse.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: the one module that may hand text to PyYAML's parser
PRIMITIVE = "driver/untrusted/yamldoc.py"
#: what PyYAML offers to read YAML with (functions, and the loader classes that parse)
_PARSERS = frozenset(
    {
        "load",
        "load_all",
        "safe_load",
        "safe_load_all",
        "full_load",
        "full_load_all",
        "unsafe_load",
        "unsafe_load_all",
        "compose",
        "compose_all",
        "parse",
        "scan",
        "Loader",
        "SafeLoader",
        "FullLoader",
        "UnsafeLoader",
        "BaseLoader",
        "CLoader",
        "CSafeLoader",
        "CFullLoader",
        "CUnsafeLoader",
        "CBaseLoader",
    }
)


class _Finder(ast.NodeVisitor):
    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.found: list[str] = []

    def visit_Attribute(self, node: ast.Attribute) -> None:
        # yaml.safe_load, yaml.CSafeLoader, and getattr-free aliases such as ``import yaml as y``
        base = node.value
        if isinstance(base, ast.Name) and base.id in self.yaml_names and node.attr in _PARSERS:
            self.found.append(f"{self.rel}:{node.lineno}: {ast.unparse(node)}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        # getattr(yaml, "CSafeLoader", ...): a parser reached by name
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in self.yaml_names
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in _PARSERS
        ):
            self.found.append(f"{self.rel}:{node.lineno}: {ast.unparse(node)}")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module is not None and node.module.split(".")[0] == "yaml":
            for alias in node.names:
                if alias.name in _PARSERS or alias.name == "*":
                    self.found.append(f"{self.rel}:{node.lineno}: from {node.module} import {alias.name}")
        self.generic_visit(node)

    yaml_names: set[str]


def _yaml_names(tree: ast.Module) -> set[str]:
    """The names the module binds to the ``yaml`` package (``import yaml``, ``import yaml as y``)."""
    names = {"yaml"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name for a in node.names if a.name.split(".")[0] == "yaml"}
    return names


def yaml_parses(root: Path) -> list[str]:
    """Every YAML parse under ``root``'s ``driver/`` and ``cdi/`` outside the primitive."""
    found: list[str] = []
    for package in ("driver", "cdi"):
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == PRIMITIVE or rel.startswith("driver/_proto/"):
                continue
            tree = ast.parse(path.read_text(), filename=rel)
            finder = _Finder(rel)
            finder.yaml_names = _yaml_names(tree)
            finder.visit(tree)
            found += finder.found
    return found


def test_every_yaml_parse_goes_through_the_primitive() -> None:
    found = yaml_parses(REPO)
    assert found == [], f"YAML parsed outside {PRIMITIVE}:\n" + "\n".join(found)


def test_the_primitive_is_where_the_scan_says() -> None:
    """The exemption names a file that exists and parses YAML (a rename cannot widen it silently)."""
    text = (REPO / PRIMITIVE).read_text()
    assert "yaml.load_all(" in text
    assert "yaml.parse(" in text


def test_a_planted_yaml_parse_is_caught(tmp_path: Path) -> None:
    """A copy of the tree with YAML parses planted in a new module: each one is found."""
    for name in ("driver", "cdi"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "driver" / "inventory" / "planted.py").write_text(
        "import yaml\nimport yaml as y\nfrom yaml import safe_load\n\n\n"
        "def f(t: str) -> None:\n"
        "    yaml.safe_load(t)\n"
        "    y.load(t, Loader=y.CSafeLoader)\n"
        "    list(yaml.safe_load_all(t))\n"
        "    yaml.compose(t)\n"
        "    getattr(yaml, 'CSafeLoader')\n"
        "    yaml.safe_dump({})\n"
    )
    found = yaml_parses(tmp_path)
    planted = [line for line in found if line.startswith("driver/inventory/planted.py")]
    # safe_load (import), safe_load, load, CSafeLoader, safe_load_all, compose, getattr: not safe_dump
    assert len(planted) == 7, found
    assert not any("safe_dump" in line for line in planted)
