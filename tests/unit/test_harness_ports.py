"""The ports the harness gives the processes it starts (``harness.poll.free_port``).

CI once lost a whole e2e session because the apiserver's port, picked from the kernel's ephemeral
range, became some client's source port before the apiserver bound it.
"""

from __future__ import annotations

import ast
import socket
from pathlib import Path

from harness.poll import ephemeral_range, free_port


def test_ports_are_never_in_the_range_outgoing_connections_take() -> None:
    low, high = ephemeral_range()
    ports = [free_port() for _ in range(200)]
    inside = [port for port in ports if low <= port <= high]
    assert not inside, f"{len(inside)} of 200 ports in the ephemeral range {low}-{high}: {inside[:5]}"
    assert all(1024 <= port < low for port in ports)


def test_no_port_is_handed_out_twice() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_a_port_handed_out_can_be_listened_on_even_with_clients_busy() -> None:
    """Fill part of the ephemeral range with live client connections, as the control plane's
    processes do, and every port handed out meanwhile still binds and listens."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(256)
        clients = [socket.create_connection(server.getsockname()) for _ in range(200)]
        try:
            for _ in range(50):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as child:
                    child.bind(("127.0.0.1", free_port()))
                    child.listen(1)
                    assert child.getsockname()[1] < ephemeral_range()[0]
        finally:
            for client in clients:
                client.close()


#: where processes get started: every port handed to one comes from ``free_port``
_SCANNED = ("bench", "harness", "tests")
_REPO = Path(__file__).resolve().parents[2]


def _pick_and_release(source: str) -> list[int]:
    """Lines where a function returns a socket's port from inside the ``with`` that closes it:
    the pick-then-release shape of a port picker (the port is free only until someone else's
    connection takes it)."""
    found: list[int] = []

    def visit(node: ast.AST, inside_with: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
                visit(child, False)
                continue
            returned = child.value if isinstance(child, ast.Return) and inside_with else None
            if returned is not None and any(
                isinstance(n, ast.Attribute) and n.attr == "getsockname" for n in ast.walk(returned)
            ):
                found.append(returned.lineno)
            visit(child, inside_with or isinstance(child, ast.With | ast.AsyncWith))

    visit(ast.parse(source), False)
    return found


def test_no_other_port_picker_releases_its_port_before_use() -> None:
    """A new helper that picks a port with ``bind(0)`` and closes it repeats the CI failure."""
    offenders = [
        f"{path.relative_to(_REPO)}:{line}"
        for folder in _SCANNED
        for path in sorted((_REPO / folder).rglob("*.py"))
        for line in _pick_and_release(path.read_text())
    ]
    assert not offenders, f"use harness.poll.free_port instead: {offenders}"


def test_the_scan_finds_the_old_picker() -> None:
    """The shape both removed pickers had is found; a listener's own port is not."""
    old = (
        "import socket\n"
        "def _port() -> int:\n"
        "    with socket.socket() as s:\n"
        '        s.bind(("127.0.0.1", 0))\n'
        "        return int(s.getsockname()[1])\n"
    )
    held = "class L:\n    def port(self) -> int:\n        return int(self._listener.getsockname()[1])\n"
    assert _pick_and_release(old) == [5]
    assert _pick_and_release(held) == []
