"""Every queue in driver/ and cdi/ has a bound: no ``Queue()``, ``SimpleQueue()`` or ``deque()`` without one.

The class of bug: a queue fed by callers (the kubelet's prepares, the runtime's containers, the
apiserver's answers) and drained by a thread that waits on a server. When the server hangs, the
queue grows with every call until the process runs out of memory; the claim Events' queue did,
and the claim status writer's. The bounded form exists for each (``QueueWorker``, ``Queue(n)``,
``deque(maxlen=n)``); this scan (AST) of every module of ``driver/`` and ``cdi/`` fails on any
construction without a bound:

* ``SimpleQueue()`` (it has none);
* ``Queue()``, ``LifoQueue()``, ``PriorityQueue()`` (``queue``, ``asyncio``, ``multiprocessing``)
  without ``maxsize``, or with a literal ``maxsize`` of zero or less (unbounded by definition);
* ``deque()`` without ``maxlen``, or with ``maxlen=None``.

A bound computed at run time counts as a bound; keep it from being zero where it is computed. A
use bounded by construction (filled from a fixed list, say) goes into :data:`ALLOWED` with a
comment saying why. The last tests plant each form and prove the scan tells them apart.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("driver", "cdi")

#: "path::function" of unbounded constructions that are bounded by construction; each with a
#: comment saying why. None so far.
ALLOWED: frozenset[str] = frozenset()

_QUEUES = frozenset({"Queue", "LifoQueue", "PriorityQueue", "JoinableQueue"})


def _name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _literal(node: ast.expr) -> object:
    """The value of a literal (``8``, ``-1``, ``None``); ``node`` itself for anything computed."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        return node


def _unbounded(call: ast.Call) -> bool:
    """True for a queue or deque construction without a bound (module docstring)."""
    name = _name(call)
    if name == "SimpleQueue":
        return True
    if name in _QUEUES:
        bound = _argument(call, 0, "maxsize")
        if bound is None:
            return True
        value = _literal(bound)
        return isinstance(value, int) and value <= 0
    if name == "deque":
        bound = _argument(call, 1, "maxlen")
        return bound is None or _literal(bound) is None
    return False


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of the module and of every function and class in it."""
    yield "<module>", tree

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qual = f"{prefix}{child.name}"
                yield qual, child
                yield from walk(child, f"{qual}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _owner(tree: ast.AST) -> dict[int, str]:
    """Each Call node's id -> the innermost function or class holding it."""
    owner: dict[int, str] = {}
    for qual, node in _functions(tree):  # outer first: inner ones overwrite
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                owner[id(sub)] = qual
    return owner


def unbounded_queues(modules: Iterator[tuple[str, str]]) -> list[str]:
    """``path::function: line: call`` of every unbounded queue of ``modules`` (path, source)."""
    found = []
    for path, source in modules:
        tree = ast.parse(source, path)
        owner = _owner(tree)
        calls = sorted(
            (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _unbounded(n)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for node in calls:
            where = f"{path}::{owner.get(id(node), '<module>')}"
            if where not in ALLOWED:
                found.append(f"{where}: line {node.lineno}: {ast.unparse(node)}")
    return found


def bounded_queues(modules: Iterator[tuple[str, str]]) -> list[str]:
    """The paths of ``modules`` that construct a queue or deque with a bound."""
    found = []
    for path, source in modules:
        for node in ast.walk(ast.parse(source, path)):
            if isinstance(node, ast.Call) and _name(node) in {*_QUEUES, "deque"} and not _unbounded(node):
                found.append(path)
    return found


def _sources() -> Iterator[tuple[str, str]]:
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            if "_proto" not in path.parts:
                yield str(path.relative_to(REPO)), path.read_text()


def test_no_unbounded_queue_in_driver_or_cdi() -> None:
    assert unbounded_queues(_sources()) == []


def test_the_scan_reads_the_queues_that_are_there() -> None:
    """It passes because the queues are bounded, not because it sees none."""
    assert {"driver/worker.py", "driver/claims/statusqueue.py"} <= set(bounded_queues(_sources()))


PLANTED = """
import asyncio
import collections
import queue
from collections import deque
from queue import Queue, SimpleQueue

class Sink:
    def __init__(self, n):
        self.a = queue.SimpleQueue()
        self.b = queue.Queue()
        self.c = Queue(0)
        self.d = queue.Queue(maxsize=-1)
        self.e = deque()
        self.f = collections.deque([1, 2])
        self.g = deque(maxlen=None)
        self.h = asyncio.Queue()
        self.i = SimpleQueue()

    def fine(self, n):
        return [queue.Queue(8), Queue(maxsize=n), deque(maxlen=n), deque([], 5), asyncio.Queue(n)]

def module_level():
    return queue.LifoQueue()
"""


def test_the_scan_finds_every_unbounded_form_and_passes_the_bounded_ones() -> None:
    found = unbounded_queues(iter([("driver/planted.py", PLANTED)]))
    assert [f.split(": ", 2)[2] for f in found] == [
        "queue.SimpleQueue()",
        "queue.Queue()",
        "Queue(0)",
        "queue.Queue(maxsize=-1)",
        "deque()",
        "collections.deque([1, 2])",
        "deque(maxlen=None)",
        "asyncio.Queue()",
        "SimpleQueue()",
        "queue.LifoQueue()",
    ]
    assert {f.split(": ")[0] for f in found} == {
        "driver/planted.py::Sink.__init__",
        "driver/planted.py::module_level",
    }
    assert len(bounded_queues(iter([("driver/planted.py", PLANTED)]))) == 5
