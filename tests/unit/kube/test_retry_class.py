"""Every ``while`` loop in driver/ that can reach an apiserver call also reaches the retry policy.

The class of bug: a loop that talks to the apiserver and, when the call fails or the watch ends
at once, goes round again without waiting (the publisher's watch loop did; a fleet behind one
broken proxy became a request storm). One test per loop catches a loop someone remembered to
test; this scan catches the loop nobody thought of. It reads every module of driver/ and checks:

    a ``while`` loop whose body calls, directly or through functions of driver/, a request
    method of :class:`~driver.kube.client.KubeClient` must also call a pacing method of
    :class:`~driver.kube.backoff.Backoff` (``failed``, ``watch_ended`` or ``wait_turn``).

Why a static scan: the pacing must be on the path of every loop, including loops added later in
modules no hostile-apiserver test runs. Why ``while`` only: a ``for`` loop over a plan's writes or
a page of items ends with its iterable; a retry loop is a ``while``. Calls are matched by name
(``x.sync()`` may be any function named ``sync`` in driver/), which over-approximates reach; a
call through a stored callable is not followed, so code that talks to the apiserver from a loop
names the methods it calls (driver/claims/statusqueue.py does). The request methods are read from
KubeClient itself, so a new one is covered at once.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import driver
from driver.kube.backoff import Backoff
from driver.kube.client import KubeClient

DRIVER = Path(driver.__file__).parent
#: KubeClient methods that send a request (not its lifecycle: configure, close)
API_CALLS = frozenset(
    name
    for name, _ in inspect.getmembers(KubeClient, inspect.isfunction)
    if not name.startswith("_") and name not in {"close", "configure"}
)
#: Backoff methods that make a loop wait: counting a failure, judging a watch, the gate
PACING = frozenset({"failed", "watch_ended", "wait_turn"})


@dataclass(frozen=True)
class Finding:
    """A loop that reaches the apiserver without the policy: where it is, what it calls."""

    where: str
    reaches: str


def _called_names(node: ast.AST) -> set[str]:
    """Names of everything called under ``node`` (``f(...)`` -> f, ``x.f(...)`` -> f)."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


def _reaching(calls_of: dict[str, set[str]], targets: frozenset[str]) -> set[str]:
    """Function names that call a target, directly or through other function names (fixpoint)."""
    reach = {name for name, calls in calls_of.items() if calls & targets}
    while True:
        more = {name for name, calls in calls_of.items() if name not in reach and calls & reach}
        if not more:
            return reach
        reach |= more


def unpaced_loops(modules: Iterable[tuple[str, str]]) -> list[Finding]:
    """The ``while`` loops of ``modules`` (path, source) that reach API_CALLS but not PACING."""
    trees = [(path, ast.parse(source, path)) for path, source in modules]
    calls_of: dict[str, set[str]] = {}
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                calls_of.setdefault(node.name, set()).update(_called_names(node))
    to_api = _reaching(calls_of, API_CALLS) | API_CALLS
    to_pacing = _reaching(calls_of, PACING) | PACING
    findings = []
    for path, tree in trees:
        for loop in ast.walk(tree):
            if not isinstance(loop, ast.While):
                continue
            called = _called_names(loop)
            if called & to_api and not called & to_pacing:
                findings.append(Finding(f"{path}:{loop.lineno}", ", ".join(sorted(called & to_api))))
    return findings


def _driver_modules() -> Iterator[tuple[str, str]]:
    for path in sorted(DRIVER.rglob("*.py")):
        if "_proto" not in path.parts:
            yield str(path.relative_to(DRIVER.parent)), path.read_text()


def test_every_loop_that_talks_to_the_apiserver_is_paced_by_the_policy() -> None:
    assert unpaced_loops(_driver_modules()) == []


def test_the_scan_sees_the_loops_that_should_be_paced() -> None:
    """With the pacing calls renamed away, the publisher's and the status writer's loops are
    flagged: the scan above passes because they are paced, not because it sees nothing."""
    assert {name for name in PACING if callable(getattr(Backoff, name, None))} == PACING
    unpaced = []
    for path, source in _driver_modules():
        renamed = source
        for name in PACING:
            renamed = renamed.replace(f".{name}(", ".not_pacing(")
        unpaced.append((path, renamed))
    where = {finding.where.split(":")[0] for finding in unpaced_loops(unpaced)}
    assert {"driver/slices/publisher.py", "driver/claims/statusqueue.py"} <= where


STORM = """
def watch_forever(api):
    while True:
        for event in api.watch_resource_slices(resource_version=""):
            print(event)
"""
THROUGH_A_HELPER = """
class Loop:
    def run(self):
        while not self.stopped:
            self.sync_once()
    def sync_once(self):
        self.api.list_resource_slices()
"""
PACED = """
def watch_forever(api, backoff):
    while True:
        try:
            list(api.watch_resource_slices())
        except Exception as err:
            backoff.wait_turn()
"""
PAGED = """
def every_page(api):
    for _ in range(3):
        api.list_resource_claims("ns")
"""


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        pytest.param(STORM, True, id="storm"),
        pytest.param(THROUGH_A_HELPER, True, id="through-a-helper"),
        pytest.param(PACED, False, id="paced"),
        pytest.param(PAGED, False, id="bounded-for"),
    ],
)
def test_the_scan_flags_an_unpaced_loop(source: str, flagged: bool) -> None:
    assert bool(unpaced_loops([("m.py", source)])) is flagged
