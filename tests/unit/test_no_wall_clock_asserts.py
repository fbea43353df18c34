"""No test asserts that something was fast.

``assert elapsed < 0.5`` passes on an idle laptop and fails on two cores shared by a CI build: it
measures the machine, not the code. Ordering and concurrency are proven with events, barriers and
counters (the unprepare answered while the prepares were still held on the server's event), and a
wait gets a generous timeout only as hang protection. This test scans (AST) every file under
``tests/`` for an ``assert`` that compares a measured duration against an upper bound below
:data:`BOUND_S`:

* a duration is a subtraction of a clock reading (``time.monotonic()``, ``time.perf_counter()``,
  ``time.time()``, or a name assigned from one, such as ``t0``), or a name assigned from such a
  subtraction (``took = time.monotonic() - t0``, also ``took[k] = ...``);
* the bound is folded from numbers and the file's module-level constants (``PER_READ / 3``); a
  bound that cannot be folded counts as below :data:`BOUND_S`.

A lower bound (``took >= 0.9``: it did wait for the time box) cannot fail on a slow machine and is
not flagged. :data:`ALLOWED` holds the few asserts whose bound is the product's own rule, each
with its reason. The last tests plant asserts and prove the scan tells them apart.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Seconds; a duration assert with a smaller upper bound is a wall-clock assert.
BOUND_S = 5.0

#: "path::function" -> why its duration bound is the product's own rule, not a speed claim.
ALLOWED: dict[str, str] = {
    "tests/integration/kube/test_hostile_proxy.py::"
    "test_a_claim_read_through_a_hostile_proxy_ends_by_its_deadline": (
        "the bounds are the rule under test: a read through a hostile proxy ends by its deadline "
        "(1.5 s, bound 5 s) and an endless header stream costs bounded CPU (it once cost 43 s)"
    ),
}

_CLOCKS = frozenset({"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns"})


@dataclass(frozen=True)
class Finding:
    """One flagged assert."""

    where: str  # path::function
    line: int
    text: str


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or node.args:
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in _CLOCKS and isinstance(func.value, ast.Name) and func.value.id == "time"
    return isinstance(func, ast.Name) and func.id in {"monotonic", "perf_counter"}


def _target_names(target: ast.AST) -> Iterator[str]:
    """The name an assignment binds: ``x``, ``self.x`` -> ``x``; ``took[k]`` -> ``took``."""
    while isinstance(target, ast.Subscript):
        target = target.value
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Attribute):
        yield target.attr
    elif isinstance(target, ast.Tuple | ast.List):
        for elt in target.elts:
            yield from _target_names(elt)


def _names_in(node: ast.AST) -> set[str]:
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return found


class _File:
    """One test file: its clock readings, its durations and its module-level numbers."""

    def __init__(self, tree: ast.Module) -> None:
        self.constants: dict[str, float] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = self.fold(node.value)
                for target in targets:
                    if isinstance(target, ast.Name) and value is not None:
                        self.constants[target.id] = value
        assigns = [
            (list(n.targets) if isinstance(n, ast.Assign) else [n.target], n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign) and n.value is not None
        ]
        self.readings: set[str] = set()  # names holding a clock reading (t0, start, deadline)
        for targets, value in assigns:
            if _is_clock_call(value) or (
                isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and _is_clock_call(value.left)
            ):
                for target in targets:
                    self.readings.update(_target_names(target))
        self.durations: set[str] = set()  # names holding a measured duration (elapsed, took)
        for targets, value in assigns:
            if value is not None and self._has_measurement(value):
                for target in targets:
                    self.durations.update(_target_names(target))

    def _timed(self, node: ast.AST) -> bool:
        return any(_is_clock_call(n) for n in ast.walk(node)) or bool(_names_in(node) & self.readings)

    def _has_measurement(self, node: ast.AST) -> bool:
        """A subtraction of a clock reading: ``now - t0`` (``t0 - 1`` is a reading, not a span)."""
        subtractions = (n for n in ast.walk(node) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub))
        return any(self._timed(n.right) for n in subtractions)

    def is_duration(self, node: ast.AST) -> bool:
        """A measured duration: a clock subtraction, or built from a name that holds one."""
        return self._has_measurement(node) or bool(_names_in(node) & self.durations)

    def fold(self, node: ast.AST) -> float | None:
        """The number an expression of numbers and module constants comes to, else None."""
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return float(node.value)
        if isinstance(node, ast.Name):
            return self.constants.get(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.fold(node.operand)
            return None if inner is None else -inner
        if isinstance(node, ast.BinOp):
            left, right = self.fold(node.left), self.fold(node.right)
            if left is None or right is None:
                return None
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Div) and right:
                return left / right
        return None

    def tight_upper_bound(self, compare: ast.Compare) -> bool:
        """``duration < bound`` (or ``bound > duration``) with a bound below BOUND_S or unknown."""
        operands = [compare.left, *compare.comparators]
        for left, op, right in zip(operands[:-1], compare.ops, operands[1:], strict=True):
            if isinstance(op, ast.Lt | ast.LtE):
                duration, bound = left, right
            elif isinstance(op, ast.Gt | ast.GtE):
                duration, bound = right, left
            else:
                continue
            if self.is_duration(duration) and not self.is_duration(bound):
                value = self.fold(bound)
                if value is None or value < BOUND_S:
                    return True
        return False


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node


def scan(source: str, path: str) -> list[Finding]:
    """Every assert in ``source`` that bounds a measured duration from above by under BOUND_S."""
    tree = ast.parse(source)
    file = _File(tree)
    found: dict[int, Finding] = {}
    for name, function in _functions(tree):
        for node in ast.walk(function):
            if not isinstance(node, ast.Assert):
                continue
            if any(isinstance(c, ast.Compare) and file.tight_upper_bound(c) for c in ast.walk(node.test)):
                found.setdefault(node.lineno, Finding(f"{path}::{name}", node.lineno, ast.unparse(node.test)))
    return sorted(found.values(), key=lambda f: f.line)


def _test_files() -> Iterator[Path]:
    yield from sorted((REPO / "tests").rglob("*.py"))


def test_no_test_asserts_a_duration_below_the_bound() -> None:
    findings = [
        f
        for path in _test_files()
        for f in scan(path.read_text(), str(path.relative_to(REPO)))
        if f.where not in ALLOWED
    ]
    listing = "\n".join(f"  {f.where}:{f.line}: assert {f.text}" for f in findings)
    assert not findings, f"wall-clock asserts (use events or counters, see the docstring):\n{listing}"


def test_every_allowed_entry_still_exists() -> None:
    """An allowlist entry for an assert that is gone would silently allow the next one."""
    flagged = {f.where for path in _test_files() for f in scan(path.read_text(), str(path.relative_to(REPO)))}
    assert set(ALLOWED) <= flagged, sorted(set(ALLOWED) - flagged)


PLANTED = """
import time
from time import monotonic
PER_READ = 3.0

def test_flagged():
    t0 = time.monotonic()
    work()
    elapsed = time.monotonic() - t0
    assert elapsed < 0.5
    assert time.perf_counter() - t0 < PER_READ / 3
    took = {}
    took["a"] = monotonic() - t0
    assert ok and max(took.values()) < 1.6
    assert 2 > elapsed
    assert elapsed < unknown_bound

def test_not_flagged():
    start = time.monotonic()
    deadline = time.monotonic() + 30
    assert time.monotonic() < deadline
    waited = time.monotonic() - start
    assert waited >= 0.9
    assert waited < 30
    assert start - 1 <= stamp <= deadline
    assert count < 3
    assert PER_READ < 5
"""


def test_the_scan_flags_tight_duration_asserts_and_only_those() -> None:
    findings = scan(PLANTED, "planted.py")
    assert [f.text for f in findings] == [
        "elapsed < 0.5",
        "time.perf_counter() - t0 < PER_READ / 3",
        "ok and max(took.values()) < 1.6",
        "2 > elapsed",
        "elapsed < unknown_bound",
    ]
    assert {f.where for f in findings} == {"planted.py::test_flagged"}
