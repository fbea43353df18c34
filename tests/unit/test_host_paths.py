"""Every host path numadra puts into a CDI spec goes through the host-path check.

``cdi.spec.Mount.host_path`` and ``DeviceNode.host_path`` are ``CheckedHostPath``, so mypy
(strict, in CI) refuses a plain ``str`` there. What mypy cannot see is checked here, on the source
(AST) of ``driver/`` and ``cdi/``:

* ``CheckedHostPath(...)`` (or a ``cast`` to it) is made only where :data:`MAKERS` says: the
  check itself, and the CDI library's reader of specs already written;
* every ``DeviceNode(...)`` in ``driver/`` names its ``host_path``: without it the runtime reads
  the node at ``path`` on the host, a path that no check saw.

The last test plants both mistakes in a copy of the tree and shows the scan catches them.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1].parent
CHECKED = "CheckedHostPath"

#: (file, enclosing function) -> why it may make a CheckedHostPath
MAKERS: dict[tuple[str, str], str] = {
    ("driver/untrusted/hostpaths.py", "check_host_path_with_stat"): "the check",
    ("driver/untrusted/hostpaths.py", "checked_child"): "numadra's own file in a checked directory",
    ("cdi/spec.py", "_read_back"): "a spec read back from JSON (checked when written, or inspected)",
    ("cdi/spec.py", "spec_from_json.edits"): "a spec read back from JSON (as above)",
}


def _names_checked(node: ast.expr) -> bool:
    text = ast.unparse(node)
    return text.strip("'\"").split(".")[-1] == CHECKED


class _Finder(ast.NodeVisitor):
    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.scope: list[str] = []
        self.found: list[str] = []
        self.used: set[tuple[str, str]] = set()

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped  # noqa: N815

    def visit_Call(self, node: ast.Call) -> None:
        where = f"{self.rel}:{node.lineno} {'.'.join(self.scope) or '<module>'}: {ast.unparse(node)[:90]}"
        func = ast.unparse(node.func).split(".")[-1]
        makes = func == CHECKED or (func == "cast" and bool(node.args) and _names_checked(node.args[0]))
        if makes:
            key = (self.rel, ".".join(self.scope) or "<module>")
            if key in MAKERS:
                self.used.add(key)
            else:
                self.found.append(f"{where} (makes a {CHECKED} outside the check)")
        named = any(k.arg == "host_path" for k in node.keywords)
        if func == "DeviceNode" and self.rel.startswith("driver/") and not named:
            self.found.append(f"{where} (a device node without its checked host_path)")
        self.generic_visit(node)


def unchecked(root: Path) -> tuple[list[str], set[tuple[str, str]]]:
    """What breaks the rule under ``root``'s ``driver/`` and ``cdi/``, and the makers met."""
    found: list[str] = []
    used: set[tuple[str, str]] = set()
    for package in ("driver", "cdi"):
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith("driver/_proto/"):
                continue
            finder = _Finder(rel)
            finder.visit(ast.parse(path.read_text(), filename=rel))
            found += finder.found
            used |= finder.used
    return found, used


def test_every_host_path_of_a_spec_is_checked() -> None:
    """No CheckedHostPath made outside the check; no device node without its checked host path."""
    found, _ = unchecked(REPO)
    assert found == [], "host paths that skip driver/untrusted/hostpaths.py:\n" + "\n".join(found)


def test_every_maker_is_still_there() -> None:
    """An entry whose code is gone is removed, so the list never grows stale cover."""
    _, used = unchecked(REPO)
    assert sorted(set(MAKERS) - used) == []


def test_planted_unchecked_paths_are_caught(tmp_path: Path) -> None:
    """A copy of the tree with a forged CheckedHostPath, a cast, and a device node without one."""
    for name in ("driver", "cdi"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "driver" / "claims" / "planted.py").write_text(
        "from typing import cast\n\n"
        "from cdi import CheckedHostPath, DeviceNode, Mount\n\n\n"
        "def f(p: str) -> list[object]:\n"
        "    return [\n"
        "        Mount(CheckedHostPath(p), '/x'),\n"
        "        Mount(cast(CheckedHostPath, p), '/x'),\n"
        "        Mount(cast('CheckedHostPath', p), '/x'),\n"
        "        DeviceNode(path=p),\n"
        "    ]\n"
    )
    found, _ = unchecked(tmp_path)
    planted = [line for line in found if line.startswith("driver/claims/planted.py")]
    assert len(planted) == 4, found
    assert sum("without its checked host_path" in line for line in planted) == 1
