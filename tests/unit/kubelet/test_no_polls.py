"""The kubelet layer waits on events, never by polling, and wraps no servicer by ``setattr``.

A scan of driver/kubelet/ (AST): no ``sleep`` inside a ``while`` loop, no ``while`` whose
condition is a timed ``wait(...)`` (``while not ready.wait(POLL)``), and no ``setattr`` (the
call slots and the door are gRPC server interceptors). Each rule is also shown to catch the
pattern it names, so the scan cannot pass by finding nothing at all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import driver.kubelet

KUBELET = Path(driver.kubelet.__file__).parent


def _called_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _calls(node: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and _called_name(n) == name]


def findings(source: str) -> list[str]:
    """``<line>: <rule>`` for each poll or servicer patch in ``source``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.While):
            for call in _calls(node, "sleep"):
                found.append(f"{call.lineno}: sleep inside a while loop")
            for call in _calls(node.test, "wait"):
                if call.args or call.keywords:
                    found.append(f"{call.lineno}: a timed wait as a while condition")
        if isinstance(node, ast.Call) and _called_name(node) == "setattr":
            found.append(f"{node.lineno}: setattr")
    return found


def test_no_poll_loop_and_no_setattr_in_driver_kubelet() -> None:
    modules = sorted(KUBELET.glob("*.py"))
    assert len(modules) > 5
    found = [f"{path.name}:{line}" for path in modules for line in findings(path.read_text())]
    assert found == []


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        pytest.param("import time\nwhile x:\n    time.sleep(0.1)\n", "sleep inside", id="time-sleep"),
        pytest.param(
            "from time import sleep\nwhile True:\n    try:\n        f()\n    except E:\n        sleep(1)\n",
            "sleep inside",
            id="bare-sleep-in-except",
        ),
        pytest.param("while not ready.wait(0.5):\n    check()\n", "timed wait", id="event-poll"),
        pytest.param("setattr(servicer, name, wrapped)\n", "setattr", id="setattr"),
    ],
)
def test_the_scan_catches_each_pattern(source: str, rule: str) -> None:
    (finding,) = findings(source)
    assert rule in finding


def test_waits_on_events_are_not_findings() -> None:
    """A condition wait in a loop's body and an untimed wait are what the layer should do."""
    source = "while not done:\n    cond.wait(left)\nwhile not ready.wait():\n    pass\n"
    assert findings(source) == []
