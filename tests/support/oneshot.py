"""A test double of an apiserver at the socket: it answers each connection's request with bytes
the test chose, then closes the connection.

Test-only. The transport's tests play answers byte for byte with it: well-formed ones, cut ones,
mangled ones, ones sent a byte per segment. ``wire`` may be changed between requests (a fuzz
test plays many answers on one server).
"""

from __future__ import annotations

import socket

from tests.support.loopback import LoopbackServer

__all__ = ["OneShotServer"]


class OneShotServer(LoopbackServer):
    """Answers every connection's first request with ``wire`` (one byte per send when
    ``bytewise``), then closes it; ``requests`` keeps the request heads it read."""

    def __init__(self, wire: bytes = b"", *, bytewise: bool = False) -> None:
        super().__init__("oneshot-http")
        self.wire, self.bytewise = wire, bytewise
        self.requests: list[bytes] = []
        self.start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            sock.settimeout(3)
            request = b""
            try:
                while b"\r\n\r\n" not in request:
                    data = sock.recv(4096)
                    if not data:
                        break
                    request += data
                self.requests.append(request)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                wire = self.wire
                if self.bytewise:
                    for i in range(len(wire)):
                        sock.sendall(wire[i : i + 1])
                else:
                    sock.sendall(wire)
            except OSError:  # the client stopped reading (an answer it refused)
                return
