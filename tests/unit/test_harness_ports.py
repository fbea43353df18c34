"""The ports the harness gives the processes it starts (``harness.poll.free_port``).

CI once lost a whole e2e session because the apiserver's port, picked from the kernel's ephemeral
range, became some client's source port before the apiserver bound it.
"""

from __future__ import annotations

import ast
import socket
from pathlib import Path

import pytest

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
    low, _ = ephemeral_range()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(256)
        clients = [socket.create_connection(server.getsockname()) for _ in range(200)]
        try:
            for _ in range(50):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as child:
                    child.bind(("127.0.0.1", free_port()))
                    child.listen(1)
                    assert child.getsockname()[1] < low
        finally:
            for client in clients:
                client.close()


@pytest.mark.parametrize("count", [2, 3])
def test_each_xdist_worker_hands_out_only_its_own_share(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """Workers of one pytest-xdist run pick from one range and each remembers only its own ports:
    gwN of ``count`` hands out ports with ``port % count == N`` only, so two workers' children
    never race for one port."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    shares = []
    for index in range(count):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        ports = [free_port() for _ in range(100)]
        assert {port % count for port in ports} == {index}
        shares.append(set(ports))
    assert set.intersection(*shares) == set()


#: where processes get started: every port handed to one comes from ``free_port``
_SCANNED = ("bench", "harness", "tests")
_REPO = Path(__file__).resolve().parents[2]


def _pick_and_release(source: str) -> list[int]:
    """Lines where a ``with`` block ends by reading a socket's port (returned or assigned): the
    socket closes right after, so the port is free only until someone else's connection takes it.
    A block that goes on to use the port while its socket is held (a busy port on purpose) is not
    this shape."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.With | ast.AsyncWith):
            continue
        last = node.body[-1]
        value = last.value if isinstance(last, ast.Return | ast.Assign | ast.AnnAssign) else None
        if value is not None and any(
            isinstance(n, ast.Attribute) and n.attr == "getsockname" for n in ast.walk(value)
        ):
            found.append(last.lineno)
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


def test_the_scan_finds_the_old_pickers() -> None:
    """Both removed pickers' shapes are found; a listener's own port and a port held busy while
    it is used are not."""
    helper = (
        "import socket\n"
        "def _port() -> int:\n"
        "    with socket.socket() as s:\n"
        '        s.bind(("127.0.0.1", 0))\n'
        "        return int(s.getsockname()[1])\n"
    )
    inline = (
        "import socket\n"
        'with socket.create_server(("127.0.0.1", 0)) as probe:\n'
        "    port = probe.getsockname()[1]\n"
        "connect(port)\n"
    )
    held = "class L:\n    def port(self) -> int:\n        return int(self._listener.getsockname()[1])\n"
    busy = (
        "import socket\n"
        "with socket.socket() as busy:\n"
        '    busy.bind(("127.0.0.1", 0))\n'
        "    port = busy.getsockname()[1]\n"
        "    spawn(port)\n"
    )
    assert _pick_and_release(helper) == [5]
    assert _pick_and_release(inline) == [3]
    assert _pick_and_release(held) == []
    assert _pick_and_release(busy) == []
