"""The metrics endpoint under hostile clients (issue 13): idle floods and slowloris headers.

Each test talks to a real MetricsServer over loopback TCP with raw sockets. What is asserted is the
outcome: the thread count of this process, the connections the server keeps, whether the server
closed a connection, whether /metrics still answers. The waits below are generous bounds on what a
timeout of a second or less must achieve, not timings.
"""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.observability import Metrics, MetricsServer

pytestmark = pytest.mark.fault


def _threads() -> int:
    """The threads of this process as the kernel counts them (grpc and others included)."""
    return sum(1 for _ in Path("/proc/self/task").iterdir())


def _get(server: MetricsServer, path: str) -> tuple[int, bytes]:
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    """True once the server closed ``sock`` (EOF or reset), waiting up to ``within`` seconds."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer(
        "127.0.0.1:0",
        metrics=Metrics(driver_name="numadra.dev", node_name="node-a"),
        idle_timeout=1.0,
        header_timeout=1.0,
    )
    srv.start()
    yield srv
    srv.stop()


def test_a_thousand_idle_connections_neither_add_threads_nor_block_metrics(server: MetricsServer) -> None:
    """Before: one thread per connection, never timed out (18 -> 1,018 threads)."""
    before = _threads()
    socks: list[socket.socket] = []
    try:
        for _ in range(1000):
            socks.append(socket.create_connection(server.address, timeout=10))
        status, body = _get(server, "/metrics")
        during = _threads()
        assert status == 200 and b"numadra_" in body
        assert server.connections <= server.max_connections
        assert server.evicted > 0  # the rest were closed by the idle timeout meanwhile
    finally:
        for sock in socks:
            sock.close()
    assert during <= before + 2, f"threads went from {before} to {during}"


def test_a_slowloris_header_is_cut(server: MetricsServer) -> None:
    """A head that never ends (a header byte every 0.2 s) is cut by the header timeout (1 s here)."""
    sock = socket.create_connection(server.address, timeout=10)
    try:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        closed = False
        for _ in range(50):  # 10 s of trickling, ten times the header timeout
            try:
                sock.sendall(b"a")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if _closed_by_server(sock, 0.2):
                closed = True
                break
        assert closed, "the server still waits for the end of a head trickled for 10 s"
    finally:
        sock.close()
    assert _get(server, "/healthz")[0] == 200


def test_an_idle_connection_is_closed(server: MetricsServer) -> None:
    sock = socket.create_connection(server.address, timeout=10)
    try:
        assert _closed_by_server(sock, 10), "an idle connection was kept for 10 s (idle timeout 1 s)"
    finally:
        sock.close()


def test_a_huge_head_is_refused(server: MetricsServer) -> None:
    sock = socket.create_connection(server.address, timeout=10)
    try:
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            sock.sendall(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 1_000_000)
            if _closed_by_server(sock, 10):
                raise ConnectionResetError
    finally:
        sock.close()


def test_keep_alive_head_and_methods(server: MetricsServer) -> None:
    """A scraper's kept-alive connection serves several requests; HEAD, POST and bodies are handled."""
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        for _ in range(3):
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            assert (resp.status, resp.read()) == (200, b"ok\n")
        conn.request("HEAD", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200 and int(resp.headers["Content-Length"]) > 0 and resp.read() == b""
        conn.request("POST", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 405
        resp.read()
        conn.request("GET", "/metrics", body=b"x")
        resp = conn.getresponse()
        assert resp.status == 400
        resp.read()
    finally:
        conn.close()


def test_stop_closes_open_connections() -> None:
    srv = MetricsServer("127.0.0.1:0", idle_timeout=60.0)
    srv.start()
    sock = socket.create_connection(srv.address, timeout=10)
    try:
        deadline = time.monotonic() + 10
        while srv.connections == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        srv.stop()
        assert _closed_by_server(sock, 10)
    finally:
        sock.close()
