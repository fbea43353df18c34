"""Tests and the harness use only the public surface of ``driver/`` and ``cdi/``.

A test that reads ``obj._journal._log`` or calls ``module._helper`` pins the implementation: the
next refactor breaks it although no behaviour changed, and the behaviour it meant to check stays
unchecked. So tests observe what a caller, the kubelet or the apiserver would see; where a seam is
real, it is made public with a docstring saying why. This test scans (AST) ``tests/`` and
``harness/`` for the ways in:

* ``from driver.x import _y`` and imports of private modules;
* ``anything._y`` where ``_y`` is a private name defined in ``driver/`` or ``cdi/`` (a function,
  class, module variable, method or ``self._y`` attribute) and not in the scanned file itself
  (a test's own doubles keep their privates);
* ``getattr``/``setattr``/``monkeypatch.setattr``/``mock.patch.object`` naming such a ``"_y"``,
  and dotted targets such as ``"driver.x._y"``;
* a subclass of a driver class that overrides one of its private methods.

The last tests plant each of them and prove the scan finds it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("driver", "cdi")
SCANNED = ("tests", "harness")

#: Private path components that are not private to tests: ``driver._proto`` holds the committed
#: protoc stubs (and their generator), which every layer imports; the layer contract names it.
PUBLIC_PRIVATE_MODULES = frozenset({"_proto"})

#: "path: finding" pairs that cannot be observed otherwise; each needs a comment saying why.
ALLOWED: frozenset[str] = frozenset()

_ATTRIBUTE_CALLS = frozenset({"getattr", "setattr", "hasattr", "delattr"})
_PATCH_CALLS = frozenset({"setattr", "object", "delattr"})  # monkeypatch.setattr, mock.patch.object


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_privates(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, variables, methods, ``self._x``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return {name for name in names if _is_private(name)}


def _python_files(root: Path, tops: tuple[str, ...]) -> Iterator[Path]:
    for top in tops:
        if (root / top).is_dir():
            yield from sorted((root / top).rglob("*.py"))


def _private_module(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in PRODUCT and any(_is_private(p) and p not in PUBLIC_PRIVATE_MODULES for p in parts)


def _product_names(tree: ast.AST) -> set[str]:
    """Names a file imports from ``driver``/``cdi`` (its modules, classes, functions)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PRODUCT:
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(
                alias.asname or alias.name.split(".")[0]
                for alias in node.names
                if alias.name.split(".")[0] in PRODUCT
            )
    return names


def _findings(tree: ast.AST, product_privates: set[str]) -> Iterator[tuple[int, str]]:
    own = _defined_privates(tree)
    reachable = product_privates - own

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PRODUCT:
            if _private_module(node.module):
                yield node.lineno, f"imports private module {node.module}"
            for alias in node.names:
                if _is_private(alias.name) or _private_module(f"{node.module}.{alias.name}"):
                    yield node.lineno, f"imports {alias.name} from {node.module}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _private_module(alias.name):
                    yield node.lineno, f"imports private module {alias.name}"
        elif isinstance(node, ast.Attribute) and node.attr in reachable:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                yield node.lineno, f"reaches {ast.unparse(node)}"
        elif isinstance(node, ast.Call):
            yield from _string_findings(node, reachable)

    imported = _product_names(tree)
    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        bases = {ast.unparse(b).split(".")[0] for b in cls.bases}
        if bases & imported:
            for item in cls.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in product_privates:
                    yield item.lineno, f"overrides {cls.name}.{item.name} of a driver class"


def _string_findings(call: ast.Call, reachable: set[str]) -> Iterator[tuple[int, str]]:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    strings = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if name in _ATTRIBUTE_CALLS | _PATCH_CALLS:
        for text in strings:
            if text in reachable:
                yield call.lineno, f"names attribute {text!r} in {ast.unparse(func)}()"
    for text in strings:
        if _private_module(text):
            yield call.lineno, f"names private target {text!r}"


def private_reaches(root: Path) -> list[str]:
    """``path:line: finding`` for every reach into a private name of ``driver/``/``cdi/``."""
    product_privates: set[str] = set()
    for path in _python_files(root, PRODUCT):
        product_privates |= _defined_privates(ast.parse(path.read_text(encoding="utf-8")))
    found = []
    for path in _python_files(root, SCANNED):
        where = path.relative_to(root)
        for line, finding in _findings(ast.parse(path.read_text(encoding="utf-8")), product_privates):
            if f"{where}: {finding}" not in ALLOWED:
                found.append(f"{where}:{line}: {finding}")
    return found


def test_tests_and_harness_use_only_the_public_surface() -> None:
    """Observe the behaviour instead (a file written, a metric, an API call), or make a real seam
    public with a docstring saying why."""
    assert private_reaches(REPO) == []


_PRODUCT_MODULE = """
_CACHE = {}


def _helper() -> int:
    return 1


class Journal:
    def __init__(self) -> None:
        self._log = None

    def _replace(self) -> None:
        pass

    def _flush(self) -> None:
        pass
"""

_PLANTED_TEST = """
import driver.state._internal
from driver.state import _hidden
from driver.state.journal import Journal, _helper
from driver.state._internal import thing
from driver import journal as j


def test_it(monkeypatch):
    journal = Journal()
    journal._log.compact_min = 0
    j._helper()
    j._CACHE.clear()
    getattr(journal, "_log")
    monkeypatch.setattr(journal, "_replace", lambda: None)
    monkeypatch.setattr("driver.state.journal._helper", lambda: 2)


class Sneaky(Journal):
    def _flush(self) -> None:
        pass
"""

_OWN_PRIVATES = """
from driver.state.journal import Journal


class _Server:
    def __init__(self) -> None:
        self._log = []
        self._threads = []


def test_own_doubles_keep_their_privates() -> None:
    server = _Server()
    assert server._log == [] and server._threads == []
    assert Journal().log is None
    assert "_x".startswith("_")
"""


def _plant(root: Path, test_text: str) -> list[str]:
    (root / "driver" / "state").mkdir(parents=True)
    (root / "driver" / "state" / "journal.py").write_text(_PRODUCT_MODULE)
    (root / "tests").mkdir()
    (root / "tests" / "test_planted.py").write_text(test_text)
    return private_reaches(root)


def test_every_way_in_is_found(tmp_path: Path) -> None:
    found = "\n".join(_plant(tmp_path, _PLANTED_TEST))
    for expected in (
        "tests/test_planted.py:2: imports private module driver.state._internal",
        "tests/test_planted.py:3: imports _hidden from driver.state",
        "tests/test_planted.py:4: imports _helper from driver.state.journal",
        "tests/test_planted.py:5: imports private module driver.state._internal",
        "tests/test_planted.py:11: reaches journal._log",
        "tests/test_planted.py:12: reaches j._helper",
        "tests/test_planted.py:13: reaches j._CACHE",
        "tests/test_planted.py:14: names attribute '_log' in getattr()",
        "tests/test_planted.py:15: names attribute '_replace' in monkeypatch.setattr()",
        "tests/test_planted.py:16: names private target 'driver.state.journal._helper'",
        "tests/test_planted.py:20: overrides Sneaky._flush of a driver class",
    ):
        assert expected in found


def test_a_tests_own_privates_and_public_names_pass(tmp_path: Path) -> None:
    """A double's own ``_log`` is not the driver's ``_log``, however named."""
    assert _plant(tmp_path, _OWN_PRIVATES) == []
