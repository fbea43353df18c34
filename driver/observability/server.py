"""The HTTP endpoint of a driver process: ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process can serve HTTP at all (the liveness probe: a wedged
process stops answering and gets restarted). ``/readyz`` answers 200 only when every readiness
check is set, e.g. ``{"registered": Event, "slices-published": Event}``; until then 503 with the
names of the checks still missing. The readiness probe is what makes a rolling update with
``maxUnavailable: 0`` wait until the new pod is registered with the kubelet and has published.

Why it is an event loop in one thread, and not the standard library's threading server: that one
starts a thread per connection and never times one out, so every idle connection a client opens
holds a thread of the driver for as long as the client likes. Here every connection is a
coroutine of one loop thread, and:

* at most ``max_connections`` are open; a new one beyond that closes the oldest connection
  that has no request being answered, or is refused if all are answering;
* a connection waits at most ``idle_timeout`` for the first byte of a request and then at
  most ``header_timeout`` for the end of its head (of bounded size), so a slowloris client
  that sends a header byte now and then is cut;
* an answer the client does not read within ``write_timeout`` closes the connection.

The defaults of those bounds are the constructor's (docs/security.md lists them).

Only ``GET`` and ``HEAD`` without a body are served. Who may connect at all is the deployment's
NetworkPolicy (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from driver.errors import ConfigError, DriverError
from driver.log import get_logger
from driver.observability.address import parse_address
from driver.observability.metrics import Metrics
from driver.supervise import supervised

__all__ = ["MetricsServer", "parse_address"]

_log = get_logger("metrics")

_ROUTES = ("/metrics", "/healthz", "/readyz")
_MAX_HEAD = 16 * 1024
_TEXT = "text/plain; charset=utf-8"


class _Conn:
    """One open connection: its writer, and whether a request of it is being answered."""

    __slots__ = ("answering", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.answering = False


class MetricsServer:
    """Serves a :class:`Metrics` registry plus health endpoints on one address.

    ``ready_checks`` maps a name to a :class:`threading.Event` that the owner sets when that
    condition holds (and may clear again: readiness is evaluated per request). ``failing_loops``
    names the core background loops that keep failing (``driver.supervise.LOOPS.failing``); while
    it names any, the process is not ready either.
    """

    def __init__(
        self,
        address: str,
        ready_checks: Mapping[str, threading.Event] | None = None,
        metrics: Metrics | None = None,
        *,
        max_connections: int = 64,
        idle_timeout: float = 15.0,
        header_timeout: float = 5.0,
        write_timeout: float = 10.0,
        failing_loops: Callable[[], Sequence[str]] = tuple,
    ) -> None:
        self._host, self._port = parse_address(address)
        self.metrics = metrics if metrics is not None else Metrics()
        self.ready_checks: Mapping[str, threading.Event] = dict(ready_checks or {})
        self._failing_loops = failing_loops
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.header_timeout = header_timeout
        self.write_timeout = write_timeout
        #: connections closed to make room for newer ones, or refused at the limit
        self.evicted = 0
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._conns: dict[_Conn, None] = {}  # insertion order: oldest first

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); the real port once started with port 0."""
        if self._sock is None:
            return self._host, self._port
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """Base URL to reach the server from this host (for tests and logs)."""
        host, port = self.address
        if host in ("0.0.0.0", "::"):  # noqa: S104 -- comparing, not binding
            host = "127.0.0.1" if host == "0.0.0.0" else "::1"  # noqa: S104
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._conns)

    def start(self) -> None:
        """Bind and serve in a daemon thread; raises ConfigError when the address cannot be bound."""
        if self._sock is not None:
            return
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ConfigError(f"metrics address {self._host}:{self._port} cannot be bound: {exc}") from exc
        self._sock = sock
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._loop = loop
        # not restartable: the event loop is closed on the way out (an escape is logged and counted)
        self._thread = supervised("metrics-http", self._run, loop, sock, ready, restart=False)
        self._thread.start()
        ready.wait(10)
        if self._server is None:
            self.stop()
            raise DriverError(f"metrics server on {self._host}:{self._port} did not start")
        _log.info("metrics server listening", url=self.url, max_connections=self.max_connections)

    def stop(self) -> None:
        """Stop serving and close the socket and every connection; safe to call twice or before start."""
        loop, thread, sock = self._loop, self._thread, self._sock
        self._loop = self._thread = self._sock = None
        if loop is None:
            return
        if not loop.is_closed():  # a failed start closed it already
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(5)
                loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=5)
        if sock is not None:
            sock.close()

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the loop thread -------------------------------------------------------------------------
    def _run(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, sock=sock, limit=_MAX_HEAD)
            )
            ready.set()
            loop.run_forever()
            tasks = asyncio.all_tasks(loop)  # connections still being served: end them cleanly
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        finally:
            loop.close()  # before ready: a failed start's stop() must find the loop closed, not idle
            ready.set()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.writer.transport.abort()
        self._conns.clear()

    def _admit(self, conn: _Conn) -> bool:
        """Make room for ``conn`` (closing the oldest connection not being answered) or refuse it."""
        if len(self._conns) >= self.max_connections:
            victim = next((c for c in self._conns if not c.answering), None)
            self.evicted += 1
            if victim is None:
                return False
            del self._conns[victim]
            victim.writer.transport.abort()
        self._conns[conn] = None
        return True

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer)
        if not self._admit(conn):
            writer.transport.abort()
            return
        try:
            while await self._serve_one(conn, reader):
                pass
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away, was too slow, or sent junk: just close
        except ValueError:  # a line over the StreamReader limit
            pass
        finally:
            self._conns.pop(conn, None)
            writer.close()

    async def _serve_one(self, conn: _Conn, reader: asyncio.StreamReader) -> bool:
        """Read one request head and answer it; False when the connection is to be closed."""
        first = await asyncio.wait_for(reader.read(1), self.idle_timeout)
        if not first:
            return False
        rest = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.header_timeout)
        conn.answering = True
        try:
            status, body, content_type, keep, head_only = self._answer((first + rest).decode("latin-1"))
            writer = conn.writer
            writer.write(_head(status, len(body), content_type, keep) + (b"" if head_only else body))
            await asyncio.wait_for(writer.drain(), self.write_timeout)
        finally:
            conn.answering = False
        return keep

    def _answer(self, head: str) -> tuple[HTTPStatus, bytes, str, bool, bool]:
        """Status, body, content type, keep-alive and "HEAD request" for one request head."""
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
            return HTTPStatus.BAD_REQUEST, b"bad request line\n", _TEXT, False, False
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip().lower()
        connection = headers.get("connection", "")
        keep = "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
        if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
            return HTTPStatus.BAD_REQUEST, b"requests with a body are not served\n", _TEXT, False, False
        if method not in ("GET", "HEAD"):
            return HTTPStatus.METHOD_NOT_ALLOWED, b"only GET and HEAD\n", _TEXT, keep, False
        status, body, content_type = self._route(target.split("?", 1)[0])
        _log.debug("http request", method=method, path=target[:100], status=int(status))
        return status, body, content_type, keep, method == "HEAD"

    def _route(self, path: str) -> tuple[HTTPStatus, bytes, str]:
        if path == "/metrics":
            return HTTPStatus.OK, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST
        if path == "/healthz":
            return HTTPStatus.OK, b"ok\n", _TEXT
        if path == "/readyz":
            missing = [name for name, event in sorted(self.ready_checks.items()) if not event.is_set()]
            missing += [f"loop {name} keeps failing" for name in self._failing_loops()]
            if missing:
                body = "".join(f"not ready: {name}\n" for name in missing).encode()
                return HTTPStatus.SERVICE_UNAVAILABLE, body, _TEXT
            return HTTPStatus.OK, b"ok\n", _TEXT
        return HTTPStatus.NOT_FOUND, f"try {', '.join(_ROUTES)}\n".encode(), _TEXT


def _head(status: HTTPStatus, length: int, content_type: str, keep: bool) -> bytes:
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
    return (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        f"Date: {date}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n"
        f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
    ).encode("latin-1")
