"""A real HTTP CONNECT proxy on loopback, for tests: a tunnel that pipes bytes both ways.

Not a fake of the apiserver: a small forward proxy of the kind a node's egress goes through
(squid and the like answer CONNECT the same way). It records each tunnel's target and the
``Proxy-Authorization`` it was asked with, can demand credentials (407 without them), and can
route a made-up host name to a real address (``routes``), so a test proves the client never
connected to the server itself: the name resolves nowhere else.
"""

from __future__ import annotations

import contextlib
import select
import socket
from collections.abc import Mapping

from tests.support.loopback import LoopbackServer

__all__ = ["ConnectProxy"]


class ConnectProxy(LoopbackServer):
    """``url`` is ``http://127.0.0.1:<port>``; ``tunnels`` lists every ``host:port`` asked for."""

    def __init__(
        self, *, routes: Mapping[str, tuple[str, int]] | None = None, authorization: str = ""
    ) -> None:
        self.routes = dict(routes or {})
        self.authorization = authorization  # the Proxy-Authorization required ("": none)
        self.tunnels: list[str] = []
        self.authorizations: list[str] = []
        super().__init__("connect-proxy")
        self.start()

    def _serve(self, client: socket.socket) -> None:
        received = self._read_head(client)
        if received is None:
            return
        head, _, early = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = [*lines[0].split(" "), "", ""][:3]
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        with self._lock:
            self.tunnels.append(target)
            self.authorizations.append(fields.get("proxy-authorization", ""))
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        if self.authorization and fields.get("proxy-authorization") != self.authorization:
            client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            return
        host, _, port = target.rpartition(":")
        address = self.routes.get(host.strip("[]"), (host.strip("[]"), int(port)))
        try:
            upstream = socket.create_connection(address, timeout=5)
        except OSError:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        upstream.settimeout(None)
        with self._lock:
            self._socks.append(upstream)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if early:
            upstream.sendall(early)
        self._pipe(client, upstream)

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self._closed.is_set():
                readable, _, _ = select.select(list(peers), [], [], 0.1)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        with contextlib.suppress(OSError):
                            peers[sock].shutdown(socket.SHUT_WR)
                        return
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            for sock in (a, b):
                with contextlib.suppress(OSError):
                    sock.close()
