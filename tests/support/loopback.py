"""A threaded TCP server on loopback that test servers build on: accept, one thread a connection, close.

Test-only. ``LoopbackServer`` owns the listener, the accept loop and the list of open connections,
so ``close()`` ends every connection a test left hanging (a tunnel, a trickled answer). Subclasses
write ``_serve(sock)``: what one connection gets. Two steps most of them take are here once:
``_read_head`` (a request head, read up to its empty line) and ``_trickle`` (an answer sent a chunk
at a time until the server closes).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterable

__all__ = ["LoopbackServer"]


class LoopbackServer:
    """Listens on ``127.0.0.1:<port>``; ``connections`` counts the accepted ones."""

    def __init__(self, name: str, backlog: int = 128) -> None:
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=backlog)
        self._listener.settimeout(0.05)  # accept() is not woken by close(): poll the closed flag
        self._closed = threading.Event()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name=name, daemon=True)

    def start(self) -> None:
        """Accept from now on (called by the subclass once its own state is set)."""
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _serve(self, sock: socket.socket) -> None:
        raise NotImplementedError

    @staticmethod
    def _read_head(sock: socket.socket) -> bytes | None:
        """What the client sent up to the end of its request head (and any bytes that came with
        it); None when it closed before the head ended."""
        head = b""
        while b"\r\n\r\n" not in head:
            data = sock.recv(65536)
            if not data:
                return None
            head += data
        return head

    def _trickle(self, sock: socket.socket, chunks: Iterable[bytes], interval: float) -> None:
        """Send each chunk ``interval`` seconds after the last, until the chunks or the server end."""
        for chunk in chunks:
            if self._closed.wait(interval):
                return
            sock.sendall(chunk)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(None)
            with self._lock:
                self.connections += 1
                self._socks.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()
