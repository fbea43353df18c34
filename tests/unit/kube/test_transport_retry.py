"""The transport's connection reuse and its one resend, against a scripted server on loopback.

Connections are counted where they arrive: ``accepted`` at the server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from driver.kube.transport import ConnectionClosedError, Response, Transport, TransportSettings
from harness.poll import free_port

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
SMUGGLED = b'HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{"evil":true}'


class _ScriptedServer:
    """Plays ``plan[n]`` on the n-th accepted connection: per request "answer", "drop" (close
    without answering), "partial" (half an answer, then close), "smuggle" (the answer and, in
    the same write, a second one nobody asked for), "slow" (answer after 0.3 s) or
    "together" (answer once ``together`` connections are waiting); after the last step it closes
    the connection, or sees the client close it."""

    def __init__(self, *plan: list[str], together: int = 1) -> None:
        self.plan = list(plan)
        self._barrier = threading.Barrier(together)
        self.requests = 0
        self.bodies: list[bytes] = []  # the body of every request read, as Content-Length framed it
        self.accepted = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            steps = self.plan[self.accepted] if self.accepted < len(self.plan) else []
            self.accepted += 1
            thread = threading.Thread(target=self._serve, args=(conn, steps), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket, steps: list[str]) -> None:
        with conn:
            pending = b""
            for step in steps:
                while b"\r\n\r\n" not in pending:
                    data = conn.recv(4096)
                    if not data:
                        return
                    pending += data
                head, pending = pending.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(pending) < length:
                    data = conn.recv(4096)
                    if not data:
                        return
                    pending += data
                self.bodies.append(pending[:length])
                pending = pending[length:]
                self.requests += 1
                if step == "drop":
                    return
                if step == "partial":
                    conn.sendall(ANSWER[:20])
                    return
                if step == "slow":
                    time.sleep(0.3)
                if step == "together":
                    self._barrier.wait(3)
                if step == "smuggle":
                    conn.sendall(ANSWER + SMUGGLED)
                    continue
                conn.sendall(ANSWER)

    def open_connections(self, expected: int) -> int:
        """Connections still open, waiting (up to 2 s) for the count to become ``expected``."""
        deadline = time.monotonic() + 2
        while True:
            count = sum(t.is_alive() for t in self._threads)
            if count == expected or time.monotonic() > deadline:
                return count
            time.sleep(0.01)

    def close(self) -> None:
        self._listener.close()
        for thread in self._threads:
            thread.join(3)


@pytest.fixture
def scripted() -> Iterator[list[_ScriptedServer]]:
    servers: list[_ScriptedServer] = []
    yield servers
    for server in servers:
        server.close()


def _client(
    servers: list[_ScriptedServer], *plan: list[str], timeout: float = 2.0, together: int = 1
) -> tuple[_ScriptedServer, Transport]:
    server = _ScriptedServer(*plan, together=together)
    servers.append(server)
    settings = TransportSettings("http", "127.0.0.1", server.port)
    return server, Transport(settings, connect_timeout=1.0, timeout=timeout)


def _get(transport: Transport, target: str = "/x") -> Response:
    return transport.request("GET", target, {}, idempotent=True)


def test_answers_reuse_one_connection(scripted: list[_ScriptedServer]) -> None:
    """Sequential GETs travel on one kept-alive connection."""
    server, transport = _client(scripted, ["answer"] * 3)
    assert [_get(transport).body for _ in range(3)] == [b"{}"] * 3
    assert (server.accepted, server.requests) == (1, 3)


def test_an_answer_nobody_asked_for_is_never_taken_for_the_next_one(scripted: list[_ScriptedServer]) -> None:
    """Bytes after a complete answer (a second answer, as a desynchronised proxy or a hostile
    server sends) retire the connection: the next request goes on a fresh one and reads its own
    answer, never the planted one."""
    server, transport = _client(scripted, ["smuggle", "answer"], ["answer"])
    assert _get(transport).body == b"{}"
    assert _get(transport).body == b"{}"
    assert (server.accepted, server.requests) == (2, 2)


def test_stale_connection_is_retried_once_on_a_fresh_one(scripted: list[_ScriptedServer]) -> None:
    """A reused connection that dies before answering: the GET is sent again on a new connection."""
    server, transport = _client(scripted, ["answer", "drop"], ["answer"])
    _get(transport)
    assert _get(transport).status == 200
    assert (server.accepted, server.requests) == (2, 3)


def test_retry_happens_only_once(scripted: list[_ScriptedServer]) -> None:
    """If the fresh connection fails too, the error comes out (no loop)."""
    server, transport = _client(scripted, ["answer", "drop"], ["drop"], ["answer"])
    _get(transport)
    with pytest.raises(ConnectionClosedError, match="without answering"):
        _get(transport)
    assert (server.accepted, server.requests) == (2, 3)


def test_fresh_connection_failure_is_not_retried(scripted: list[_ScriptedServer]) -> None:
    """A new connection that dies before answering is a real failure, not a stale keep-alive."""
    server, transport = _client(scripted, ["drop"], ["answer"])
    with pytest.raises(ConnectionClosedError):
        _get(transport)
    assert (server.accepted, server.requests) == (1, 1)


def test_partial_answer_is_not_retried(scripted: list[_ScriptedServer]) -> None:
    """Once the server said something, a broken answer is reported, not resent."""
    server, transport = _client(scripted, ["answer", "partial"], ["answer"])
    _get(transport)
    with pytest.raises(ConnectionClosedError, match="bytes into the answer"):
        _get(transport)
    assert (server.accepted, server.requests) == (1, 2)


def test_timeout_is_not_retried_and_names_the_limit(scripted: list[_ScriptedServer]) -> None:
    """A slow answer on a reused connection times out once, with a message naming the limit: the
    answer (0.3 s late) would have been a success, and a retry would be a second connection."""
    server, transport = _client(scripted, ["answer", "slow"], ["answer"], timeout=0.1)
    _get(transport)
    with pytest.raises(TimeoutError, match=r"read timeout of 0\.1 s"):
        _get(transport)
    assert (server.accepted, server.requests) == (1, 2)


def test_idle_connection_closed_by_the_server_is_not_used(scripted: list[_ScriptedServer]) -> None:
    """A kept connection the server has since closed is noticed at checkout: no request is lost on it."""
    server, transport = _client(scripted, ["answer"], ["answer"])
    _get(transport)
    deadline = time.monotonic() + 2
    while server._threads[0].is_alive() and time.monotonic() < deadline:  # the server closes it
        time.sleep(0.01)
    assert _get(transport).status == 200
    assert (server.accepted, server.requests) == (2, 2)


def test_connection_refused_raises_at_once() -> None:
    """Nobody listening: ConnectionRefusedError straight away, no retry."""
    transport = Transport(
        TransportSettings("http", "127.0.0.1", free_port()), connect_timeout=1.0, timeout=1.0
    )
    with pytest.raises(ConnectionRefusedError):
        _get(transport)


def test_pool_keeps_at_most_max_idle(scripted: list[_ScriptedServer]) -> None:
    """Concurrent callers each get a connection; only ``max_idle`` stay open afterwards."""
    server, transport = _client(scripted, *(["together", "answer"] for _ in range(4)), together=4)
    transport.max_idle = 2
    threads = [threading.Thread(target=_get, args=(transport,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(3)
    assert (server.accepted, server.requests) == (4, 4)
    assert server.open_connections(2) == 2


def test_close_closes_idle_connections(scripted: list[_ScriptedServer]) -> None:
    """close() closes the kept connections at once."""
    server, transport = _client(scripted, ["answer", "answer"])
    _get(transport)
    assert server.open_connections(1) == 1
    transport.close()
    assert server.open_connections(0) == 0


def test_connection_in_use_at_close_is_not_kept(scripted: list[_ScriptedServer]) -> None:
    """A connection busy during close() is closed when its GET is done, not put back."""
    server, transport = _client(scripted, ["answer", "slow", "answer"])
    _get(transport)
    slow = threading.Thread(target=_get, args=(transport,))
    slow.start()
    time.sleep(0.1)
    transport.close()
    slow.join(3)
    assert server.requests == 2
    assert server.open_connections(0) == 0


APPLY = b'{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim"}'


def test_request_sends_its_body_framed_by_content_length(scripted: list[_ScriptedServer]) -> None:
    """A PATCH carries its body with a Content-Length; the next request on the connection is intact."""
    server, transport = _client(scripted, ["answer", "answer"])
    headers = {"Content-Type": "application/apply-patch+yaml"}
    assert transport.request("PATCH", "/x/status", headers, APPLY, idempotent=True).status == 200
    assert _get(transport).status == 200
    assert server.bodies == [APPLY, b""]
    assert (server.accepted, server.requests) == (1, 2)


def test_idempotent_request_is_resent_once_with_its_body(scripted: list[_ScriptedServer]) -> None:
    """An apply on a kept connection the server dropped is sent again, whole, on a fresh one."""
    server, transport = _client(scripted, ["answer", "drop"], ["answer"])
    _get(transport)
    assert transport.request("PATCH", "/x/status", {}, APPLY, idempotent=True).status == 200
    assert server.bodies == [b"", APPLY, APPLY]
    assert (server.accepted, server.requests) == (2, 3)


def test_request_not_declared_idempotent_is_never_resent(scripted: list[_ScriptedServer]) -> None:
    """The server may have acted on a dropped request: one that is not idempotent fails instead."""
    server, transport = _client(scripted, ["answer", "drop"], ["answer"])
    _get(transport)
    with pytest.raises(ConnectionClosedError, match="without answering"):
        transport.request("POST", "/x", {}, b"{}", idempotent=False)
    assert (server.accepted, server.requests) == (1, 2)


def test_a_request_names_its_own_deadline(scripted: list[_ScriptedServer]) -> None:
    """A per-call deadline ends the request; the error names the method and that deadline."""
    _, transport = _client(scripted, ["slow"], timeout=5.0)
    with pytest.raises(TimeoutError, match=r"PATCH exceeded its deadline of 0\.1 s"):
        transport.request("PATCH", "/x/status", {}, APPLY, idempotent=True, deadline=0.1)
    assert transport.deadline == 6.0  # the transport's own (connect + read timeout) is untouched


def test_method_with_control_characters_is_refused_before_sending(scripted: list[_ScriptedServer]) -> None:
    """A method cannot smuggle a second request line."""
    server, transport = _client(scripted, ["answer"])
    with pytest.raises(ValueError, match="invalid method"):
        transport.request("GET /y HTTP/1.1\r\nX:", "/x", {}, idempotent=True)
    assert (server.accepted, server.requests) == (0, 0)


def test_head_is_refused_its_answer_would_be_misread(scripted: list[_ScriptedServer]) -> None:
    """An answer to HEAD announces a body it does not carry; nothing here sends HEAD, so it is
    refused rather than read wrongly."""
    server, transport = _client(scripted, ["answer"])
    with pytest.raises(ValueError, match="invalid method"):
        transport.request("HEAD", "/x", {}, idempotent=True)
    assert server.accepted == 0
