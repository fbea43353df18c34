"""A hostile HTTP CONNECT proxy: a real TCP server that never lets the tunnel come up in time.

Test-only fake at the network boundary (a broken or malicious egress proxy cannot be made from a
real proxy on demand). Every connection reads one ``CONNECT`` head and then, by ``mode``:

* ``status-trickle``: the status line one byte every ``interval``, never its end;
* ``header-trickle``: a ``200`` status line, then one header line every ``interval``, never the
  empty line that ends the head;
* ``header-flood``: a ``200`` status line, then header lines as fast as the socket takes them;
* ``tls-trickle``: a proper ``200`` (the tunnel is up), then, once the client's TLS hello came,
  a TLS record that promises 16 KiB and sends one byte of it every ``interval``.

Each byte arrives well within any per-read timeout, so only the request's overall deadline (or
a bound on the head) ends the dial. ``connections`` counts accepted connections.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Literal

from tests.support.loopback import LoopbackServer

ProxyMode = Literal["status-trickle", "header-trickle", "header-flood", "tls-trickle"]


class HostileProxy(LoopbackServer):
    """See the module docstring; ``url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, mode: ProxyMode, interval: float = 0.2) -> None:
        self.mode = mode
        self.interval = interval
        super().__init__("hostile-proxy")
        self.start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            if self._read_head(sock) is None:
                return
            if self.mode == "header-flood":
                sock.sendall(b"HTTP/1.1 200 Connection established\r\n")
                line = 0
                while not self._closed.is_set():
                    line += 1
                    sock.sendall(b"X-Line-%d: a\r\n" % line)
                return
            if self.mode == "tls-trickle":
                sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if not sock.recv(65536):  # the client's hello
                    return
            self._trickle(sock, self._chunks(), self.interval)
        except OSError:
            return

    def _chunks(self) -> Iterator[bytes]:
        if self.mode == "status-trickle":
            for byte in b"HTTP/1.1 200 Connection established":
                yield bytes([byte])
            while True:
                yield b"a"
        if self.mode == "header-trickle":
            yield b"HTTP/1.1 200 Connection established\r\n"
            line = 0
            while True:
                line += 1
                yield b"X-Line-%d: a\r\n" % line
        yield b"\x16\x03\x03\x40\x00"  # a handshake record of 16 KiB: the client waits for all of it
        while True:
            yield b"\x00"
