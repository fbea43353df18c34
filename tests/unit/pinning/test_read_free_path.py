"""The NRI plugin's answering path never reaches a read of the apiserver (AST scan).

The plugin answers every request first on a pool whose threads must never wait on the apiserver
(``driver.pinning.nri.plugin``: a container that needs no read is never queued behind one that
does). What runs there is the ``answer`` handler of each method in the plugin's method table.
This scan reads that table, then follows, in ``driver/pinning/nri/handlers.py``, every method and
module function those handlers reach (``self.x`` and plain names); none may reach the handlers'
reading confirm (``self._reads``, :meth:`ConsumerCheck.confirm`). In
``driver/pinning/consumers.py`` the read-free question (:meth:`ConsumerCheck.remembered`) may not
reach the reader. And the plugin submits only ``answer`` handlers to its answering pool, only
``read`` handlers to its read pool. The last tests plant violations and prove the scan finds them.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "driver/pinning/nri/plugin.py"
HANDLERS = REPO / "driver/pinning/nri/handlers.py"
CONSUMERS = REPO / "driver/pinning/consumers.py"


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"no class {name}")


def reached(tree: ast.Module, cls: str, entries: set[str]) -> set[str]:
    """Every name reached from ``entries`` (methods of ``cls``): the ``self.x`` attributes they
    touch, the methods and module functions they use, followed transitively."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    methods = {n.name: n for n in _class(tree, cls).body if isinstance(n, ast.FunctionDef)}
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        body = methods.get(name) or functions.get(name)
        if body is None:
            continue
        for node in ast.walk(body):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                todo.append(node.attr)
            elif isinstance(node, ast.Name) and node.id in functions:
                todo.append(node.id)
    return seen


def answering_handlers(plugin: ast.Module) -> set[str]:
    """The handler methods the plugin's method table runs on its answering pool (``h.x``)."""
    names: set[str] = set()
    for node in ast.walk(plugin):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_Method":
            answer = node.args[1] if len(node.args) > 1 else None
            if (
                isinstance(answer, ast.Attribute)
                and isinstance(answer.value, ast.Name)
                and answer.value.id == "h"
            ):
                names.add(answer.attr)
    return names


def pool_submissions(plugin: ast.Module) -> dict[str, set[str]]:
    """Pool attribute -> what is submitted to it, as source text (``self._answer.submit(x, ...)``)."""
    out: dict[str, set[str]] = {}
    for node in ast.walk(plugin):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "submit"
            and isinstance(node.func.value, ast.Attribute)
        ):
            out.setdefault(node.func.value.attr, set()).add(ast.unparse(node.args[0]))
    return out


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def test_the_answering_handlers_never_reach_a_read() -> None:
    entries = answering_handlers(_parse(PLUGIN))
    assert {"create_container_read_free", "update_container_read_free", "stop_container"} <= entries
    assert not entries & {"create_container", "update_container", "synchronize"}
    handlers = _parse(HANDLERS)
    assert "_reads" not in reached(handlers, "PinningHandlers", entries)
    # the scan sees a read where there is one
    assert "_reads" in reached(handlers, "PinningHandlers", {"create_container"})


def test_the_remembered_answer_never_reaches_the_reader() -> None:
    consumers = _parse(CONSUMERS)
    assert not {"_reader", "_read"} & reached(consumers, "ConsumerCheck", {"remembered"})
    assert {"_reader", "_read"} <= reached(consumers, "ConsumerCheck", {"confirm"})


def test_each_pool_runs_only_its_kind_of_handler() -> None:
    submitted = pool_submissions(_parse(PLUGIN))
    assert submitted["_answer"] == {"call.method.answer"}
    assert submitted["_reads"] == {"call.method.read"}
    assert submitted["_dispatch"] == {"self._serve"}
    assert submitted["_read_waits"] == {"self._serve_read"}


PLANTED = """
def helper(x):
    return x

class PinningHandlers:
    def create_container_read_free(self, req):
        return self._bind(req)

    def _bind(self, req):
        return helper(self._reads(req))
"""


def test_a_planted_read_on_the_answering_path_is_found() -> None:
    """A read-free handler that reaches the reading confirm through a helper method is flagged."""
    tree = ast.parse(PLANTED)
    assert {"_bind", "helper", "_reads"} <= reached(tree, "PinningHandlers", {"create_container_read_free"})


def test_a_planted_reading_handler_on_the_answering_pool_is_found() -> None:
    table = ast.parse(
        "h = handlers\nm = {'CreateContainer': _Method(T, h.create_container, h.create_container)}\n"
        "self._answer.submit(self.handlers.create_container, req)\n"
    )
    assert answering_handlers(table) == {"create_container"}
    assert pool_submissions(table) == {"_answer": {"self.handlers.create_container"}}
