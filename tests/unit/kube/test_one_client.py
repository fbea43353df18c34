"""One apiserver client per process, built by the builder and handed to every part.

A module-level cache of clients (the old ``shared_client``) made the client's settings a fact
kept in two places (the cache's first caller decided them, the next ones changed them after),
and the NRI path built a second client beside it. These scans keep both from coming back.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from driver.claims.consumers import ApiConsumerReader

DRIVER = Path(__file__).resolve().parents[3] / "driver"


def _calls_to(name: str) -> list[str]:
    found = []
    for path in sorted(DRIVER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
                found.append(f"{path.relative_to(DRIVER.parent)}:{node.lineno}")
    return found


def test_the_builder_makes_the_one_client_of_numadra_run() -> None:
    """``numadra run``'s client is made once, in driver/app.py; ``numadra explain`` is another
    command, with its own process and its own client."""
    made = _calls_to("KubeClient")
    assert [m.split(":")[0] for m in made] == ["driver/app.py", "driver/cli/explain.py"], made


def _module_caches(tree: ast.Module) -> list[int]:
    """Lines of module-level names bound to an empty dict, list or set: a cache kept by the module."""
    lines = []
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        empty_display = isinstance(value, ast.Dict | ast.List | ast.Set) and not (
            getattr(value, "keys", None) or getattr(value, "elts", None)
        )
        empty_call = (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id in {"dict", "list", "set"}
            and not value.args
        )
        if empty_display or empty_call:
            lines.append(node.lineno)
    return lines


def test_no_module_keeps_a_cache_of_apiserver_state() -> None:
    found = [
        f"{path.name}:{line}"
        for path in sorted((DRIVER / "kube").glob("*.py"))
        for line in _module_caches(ast.parse(path.read_text()))
    ]
    assert not found, f"module-level caches in driver/kube: {found}"


def test_the_scan_finds_a_planted_cache() -> None:
    planted = ast.parse("_shared: dict[str, object] = {}\n_pool = list()\nOK = {'a': 1}\n")
    assert _module_caches(planted) == [1, 2]


class _Recorder:
    def __init__(self) -> None:
        self.deadlines: list[float | None] = []

    def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> Any:
        self.deadlines.append(deadline)
        return {"metadata": {"uid": "u-1"}, "status": {"reservedFor": []}}


def test_the_nri_path_reads_on_the_one_client_with_its_own_deadline() -> None:
    """The consumer reader cuts its read at its deadline (the runtime's time box), on whatever
    client it was handed, and leaves the client's own deadline to every other caller."""
    client = _Recorder()
    ApiConsumerReader(client, deadline=0.5)("ns", "claim", "u-1")
    ApiConsumerReader(client)("ns", "claim", "u-1")
    assert client.deadlines == [0.5, None]
