"""A hostile apiserver: a real TCP server that never finishes an answer, only keeps it alive.

Test-only fake at the network boundary (a broken apiserver, or a proxy in front of one, cannot be
made from the real binaries on demand). Every connection reads one request head and then, by
``mode``:

* ``trickle-body``: a 200 head promising 100 000 body bytes, then one byte every ``interval``;
* ``trickle-head``: the status line and headers, one byte every ``interval``, never the end;
* ``continue``: ``HTTP/1.1 100 Continue`` every ``interval``, never a final answer.

Each byte arrives well within any per-read timeout, so only an overall deadline ends the read.
``connections`` counts accepted connections; ``close()`` drops them all.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Literal

from tests.support.loopback import LoopbackServer

Mode = Literal["trickle-body", "trickle-head", "continue"]


class HostileApiServer(LoopbackServer):
    """See the module docstring; ``url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, mode: Mode, interval: float = 0.2) -> None:
        self.mode = mode
        self.interval = interval
        super().__init__("hostile-api")
        self.start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            if self._read_head(sock) is not None:
                self._trickle(sock, self._chunks(), self.interval)
        except OSError:
            return

    def _chunks(self) -> Iterator[bytes]:
        if self.mode == "continue":
            while True:
                yield b"HTTP/1.1 100 Continue\r\n\r\n"
        if self.mode == "trickle-head":
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 10_000:
                yield bytes([byte])
            while True:
                yield b"a"
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
        while True:
            yield b" "


def wait_connections(server: HostileApiServer, count: int, timeout: float = 30.0) -> None:
    """Wait until ``count`` connections were accepted (the reads are then stuck in it)."""
    deadline = time.monotonic() + timeout
    while server.connections < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {server.connections} of {count} connections after {timeout} s")
        time.sleep(0.02)
