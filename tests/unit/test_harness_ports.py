"""The ports the harness gives the processes it starts (``harness.poll.free_port``).

CI once lost a whole e2e session because the apiserver's port, picked from the kernel's ephemeral
range, became some client's source port before the apiserver bound it.
"""

from __future__ import annotations

import socket

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
