"""Every test asserts something that can fail.

A test that only calls code passes whatever the code does, short of an exception, and its name
promises a behaviour nobody checks. This test scans (AST) every ``test*`` function of the test
files under ``tests/`` and requires, in its body or in a helper it calls by name (defined in the
same file, or imported from ``tests.*`` or ``harness.*``, followed transitively):

* an ``assert`` statement or ``raise AssertionError``;
* ``pytest.raises``, ``pytest.warns``, ``pytest.fail`` or ``pytest.deprecated_call``;
* or a call to a helper named ``assert_*``, ``check_*`` or ``expect_*`` (a leading ``_`` allowed)
  that is not the product's own (``driver.kubelet.claims.check_claim`` checks a claim, it asserts
  nothing about the test).

The last tests plant a test that asserts nothing, and the ways that count, and prove the scan
tells them apart.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("driver", "cdi")
HELPERS = ("tests", "harness")

#: "path::test" of tests that truly cannot assert; each needs a comment saying why. None so far.
ALLOWED: frozenset[str] = frozenset()

_ASSERTING_HELPER = re.compile(r"_?(assert|check|expect)_")
_PYTEST_CHECKS = frozenset({"raises", "warns", "fail", "deprecated_call"})

Functions = dict[str, ast.FunctionDef | ast.AsyncFunctionDef]


def _module_name(root: Path, path: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


def _top_functions(tree: ast.Module) -> Functions:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _called_name(call: ast.Call) -> str:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else ""


class _Scope:
    """The helpers one test file can call by name, and the names it took from the product."""

    def __init__(self, tree: ast.Module, index: dict[str, Functions]) -> None:
        self.functions: Functions = {}
        self.product_names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                top = node.module.split(".")[0]
                for alias in node.names:
                    name = alias.asname or alias.name
                    if top in PRODUCT:
                        self.product_names.add(name)
                    elif top in HELPERS and alias.name in index.get(node.module, {}):
                        self.functions[name] = index[node.module][alias.name]
        for node in ast.walk(tree):  # the file's own functions, nested and methods included
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions.setdefault(node.name, node)

    def asserts(self, function: ast.AST, seen: set[str]) -> bool:
        for node in ast.walk(function):
            if isinstance(node, ast.Assert):
                return True
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id == "AssertionError":
                    return True
            if isinstance(node, ast.Call) and self._checks(node, seen):
                return True
        return False

    def _checks(self, call: ast.Call, seen: set[str]) -> bool:
        name = _called_name(call)
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "pytest":
            return name in _PYTEST_CHECKS
        if isinstance(func, ast.Name) and name in _PYTEST_CHECKS and name not in self.product_names:
            return True  # from pytest import raises
        if _ASSERTING_HELPER.match(name) and name not in self.product_names:
            return True
        if isinstance(func, ast.Name) and name in self.functions and name not in seen:
            seen.add(name)
            return self.asserts(self.functions[name], seen)
        return False


def _helper_index(root: Path) -> dict[str, Functions]:
    index: dict[str, Functions] = {}
    for top in HELPERS:
        for path in sorted((root / top).rglob("*.py")) if (root / top).is_dir() else ():
            index[_module_name(root, path)] = _top_functions(ast.parse(path.read_text(encoding="utf-8")))
    return index


def _tests(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            yield node


def unasserting_tests(root: Path) -> list[str]:
    """``path:line::name`` of every test that checks nothing."""
    index = _helper_index(root)
    found = []
    for path in sorted((root / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        scope = _Scope(tree, index)
        where = path.relative_to(root)
        for test in _tests(tree):
            if not scope.asserts(test, {test.name}) and f"{where}::{test.name}" not in ALLOWED:
                found.append(f"{where}:{test.lineno}::{test.name}")
    return found


def test_every_test_asserts_something() -> None:
    """Assert the behaviour the test is named for (a result, a file, a log line, a call made)."""
    assert unasserting_tests(REPO) == []


_PLANTED = """
import pytest

from driver.kubelet.claims import check_claim
from harness.poll import wait_for
from tests.helpers import expect_ready, quietly


def _local_check(x):
    assert x


def _indirect(x):
    _local_check(x)


def test_only_calls_code():
    quietly()


def test_calls_the_products_check_only():
    check_claim({}, None)


def test_asserts():
    assert 1


def test_raises():
    with pytest.raises(ValueError):
        int("x")


def test_fails_explicitly():
    if quietly():
        pytest.fail("no")


def test_named_helper():
    expect_ready()


def test_local_helper_transitively():
    _indirect(1)


def test_imported_waiting_helper():
    wait_for(lambda: True, 1, "it")


class TestGroup:
    def test_method_without_assert(self):
        quietly()

    def test_method_with_assert(self):
        assert quietly() is None
"""

_HELPERS = """
def expect_ready():
    pass


def quietly():
    return None
"""

_POLL = """
def wait_for(predicate, timeout, what):
    if not predicate():
        raise AssertionError(f"timed out waiting for {what}")
"""


def test_a_test_that_only_calls_code_is_found(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "harness").mkdir()
    (tmp_path / "tests" / "test_planted.py").write_text(_PLANTED)
    (tmp_path / "tests" / "helpers.py").write_text(_HELPERS)
    (tmp_path / "harness" / "poll.py").write_text(_POLL)
    assert unasserting_tests(tmp_path) == [
        "tests/test_planted.py:17::test_only_calls_code",
        "tests/test_planted.py:21::test_calls_the_products_check_only",
        "tests/test_planted.py:52::test_method_without_assert",
    ]
