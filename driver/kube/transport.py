"""A lean HTTP/1.1 keep-alive transport for the JSON GETs on the prepare hot path (claim reads).

Why it exists: one claim GET through the official client (urllib3 + ApiClient) costs about 1 ms of
our CPU, a large share of a 5 ms prepare; the same GET on a kept-alive socket with the minimal
parsing below costs a fraction of that. It does only what those reads need (GET, HTTP/1.1, a body
sized by Content-Length or chunked, no compression) and leaves every other call to the official
client:

* :func:`settings_from_configuration` takes the host, TLS and socket settings from the official
  client's ``Configuration`` and raises :class:`UnsupportedConfigError` for anything it cannot
  honour (a proxy, a certificate name override, client-go style retries), so that the caller falls
  back to the official client instead of silently dropping a setting.
* Authorization is the caller's: it passes the headers of each request, read through the
  Configuration's own ``auth_settings()`` so that token refresh hooks keep working.
* Connections are pooled last-in first-out (the warmest first), at most ``max_idle`` kept. A GET
  that fails on a reused connection before any byte of the answer arrived (the server closed it
  while it sat idle) is sent once more on a fresh connection: GETs are idempotent.
* Every GET has an overall deadline besides the per-read timeout. A per-read timeout alone is
  reset by every byte, so an apiserver (or a proxy in front of it) that trickles one byte a
  second, or sends ``100 Continue`` without end, held a prepare call for minutes, past the
  kubelet's 45 s. Each ``recv`` now waits at most until the deadline, and at most
  ``_MAX_INTERIM`` interim answers are read.

Failures are plain exceptions (the ``OSError`` family, :class:`ProtocolError`); the caller maps
them to :class:`~driver.errors.KubeError` in one place.
"""

from __future__ import annotations

import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "ConnectionClosedError",
    "ProtocolError",
    "Response",
    "ResponseReader",
    "Transport",
    "TransportSettings",
    "UnsupportedConfigError",
    "configuration_key",
    "settings_from_configuration",
]

_RECV_SIZE = 65536
_MAX_LINE = 64 * 1024  # a status line plus headers, or a chunk-size line, longer than this is junk
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # never allowed in a header value
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")  # never allowed in a request target
_HEX = frozenset(b"0123456789abcdefABCDEF")
#: interim (1xx) answers read before the real one; a GET gets none in practice (it sends no
#: ``Expect``), so more than a few is a server that will never answer
_MAX_INTERIM = 8
#: a socket timeout is only reset when it would change by this much (seconds)
_REARM = 0.1


class UnsupportedConfigError(ValueError):
    """The configuration asks for something this transport does not do; use the official client."""


class ProtocolError(Exception):
    """The server's answer is not the HTTP/1.1 this transport reads."""


class ConnectionClosedError(ConnectionError):
    """The server closed the connection before the answer was complete."""


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """Where to connect and how, as plain values (see :func:`settings_from_configuration`)."""

    scheme: str  # "http" or "https"
    host: str  # a name or an IP address, without brackets
    port: int
    base_path: str = ""  # the server URL's path ("/prefix" behind a gateway), prepended to every path
    verify: bool = True  # verify the server certificate chain
    check_hostname: bool = True  # ... and that it names the server
    server_hostname: str = ""  # the name sent as SNI and checked ("": ``host``)
    ca_file: str = ""
    ca_data: str | bytes = ""  # PEM text or DER bytes
    cert_file: str = ""  # client certificate (and key, when ``key_file`` is empty)
    key_file: str = ""
    socket_options: tuple[tuple[int, int, int | bytes], ...] = ()

    @property
    def host_header(self) -> str:
        """The Host header: the port only when it is not the scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context for https (reads the CA and client certificate files now), else None."""
        if self.scheme != "https":
            return None
        ctx = ssl.create_default_context(cafile=self.ca_file or None, cadata=self.ca_data or None)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif not self.check_hostname:
            ctx.check_hostname = False
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file or None)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx


def settings_from_configuration(cfg: Any) -> TransportSettings:
    """The settings of an official client ``Configuration``, or :class:`UnsupportedConfigError`.

    Mirrors what ``kubernetes.client.rest.RESTClientObject`` does with the same fields, so both
    transports talk to the same server the same way.
    """
    url = urlsplit(str(cfg.host))
    if url.scheme not in ("http", "https"):
        raise UnsupportedConfigError(f"server scheme {url.scheme!r}")
    if not url.hostname or url.username or url.password or url.query or url.fragment:
        raise UnsupportedConfigError(f"server URL {cfg.host!r}")
    if cfg.proxy:
        from kubernetes.client.rest import should_bypass_proxies

        if not should_bypass_proxies(str(cfg.host), cfg.no_proxy or ""):
            raise UnsupportedConfigError("a proxy is configured")
    assert_hostname = cfg.assert_hostname
    if assert_hostname not in (None, True, False):
        raise UnsupportedConfigError("assert_hostname names a different host")
    if getattr(cfg, "client_go_retries", False):
        raise UnsupportedConfigError("client-go style retries are configured")
    options: list[tuple[int, int, int | bytes]] = []
    if cfg.socket_options is not None:
        options = list(cfg.socket_options)
    elif getattr(cfg, "keep_alive", False):
        from kubernetes.utils.keepalive import tcp_keepalive_socket_options

        options = list(tcp_keepalive_socket_options())
    port = url.port or (443 if url.scheme == "https" else 80)
    return TransportSettings(
        scheme=url.scheme,
        host=url.hostname,
        port=port,
        base_path=url.path.rstrip("/"),
        verify=bool(cfg.verify_ssl),
        check_hostname=assert_hostname is not False,
        server_hostname=cfg.tls_server_name or "",
        ca_file=cfg.ssl_ca_cert or "",
        ca_data=cfg.ca_cert_data or "",
        cert_file=cfg.cert_file or "",
        key_file=cfg.key_file or "",
        socket_options=tuple(options),
    )


def configuration_key(cfg: Any) -> tuple[Any, ...]:
    """Every ``Configuration`` field :func:`settings_from_configuration` reads, to notice a change.

    A refresh hook may swap them (an exec plugin returning a new client certificate); comparing
    this key per request costs about a microsecond.
    """
    return (
        cfg.host,
        cfg.proxy,
        cfg.no_proxy,
        cfg.assert_hostname,
        cfg.verify_ssl,
        cfg.tls_server_name,
        cfg.ssl_ca_cert,
        cfg.ca_cert_data,
        cfg.cert_file,
        cfg.key_file,
        cfg.socket_options,
        getattr(cfg, "keep_alive", False),
        getattr(cfg, "client_go_retries", False),
    )


@dataclass(frozen=True, slots=True)
class Response:
    """One complete answer; ``keep_alive`` says whether the connection may carry another request."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case
    keep_alive: bool = True


class ResponseReader:
    """Reads HTTP/1.x answers from ``recv`` (a socket's, or anything returning b"" at the end).

    ``received`` counts the bytes of the current answer so far: the retry rule needs to know
    whether the server said anything at all before the connection broke.
    """

    __slots__ = ("_recv", "buf", "received")

    def __init__(self, recv: Callable[[int], bytes]) -> None:
        self._recv = recv
        self.buf = bytearray()
        self.received = 0

    def read_response(self) -> Response:
        """Read one answer to a GET, skipping interim 1xx answers."""
        self.received = len(self.buf)
        interim = 0
        while True:
            version, status, headers = self._read_head()
            if status == 101 or status >= 200:
                break
            interim += 1
            if interim > _MAX_INTERIM:
                raise ProtocolError(f"more than {_MAX_INTERIM} interim 1xx answers and no final one")
        if status == 101:
            raise ProtocolError("the server switched protocols")
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            raise ProtocolError(f"content-encoding {encoding!r} was not asked for")
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        keep_alive = "close" not in tokens if version == "HTTP/1.1" else "keep-alive" in tokens
        codings = [c.strip().lower() for c in headers.get("transfer-encoding", "").split(",") if c.strip()]
        if status in (204, 304):
            body = b""
        elif codings:
            if codings != ["chunked"]:
                raise ProtocolError(f"transfer-encoding {headers['transfer-encoding']!r}")
            body = self._read_chunked()
        elif "content-length" in headers:
            body = self._read_exact(_content_length(headers["content-length"]))
        else:
            body, keep_alive = self._read_to_eof(), False
        return Response(status, body, headers, keep_alive and not self.buf)

    # -- pieces ----------------------------------------------------------------------------------
    def _fill(self) -> None:
        data = self._recv(_RECV_SIZE)
        if not data:
            if self.received:
                raise ConnectionClosedError(
                    f"the server closed the connection {self.received} bytes into the answer"
                )
            raise ConnectionClosedError("the server closed the connection without answering")
        self.received += len(data)
        self.buf += data

    def _read_until(self, marker: bytes) -> bytes:
        """The bytes before ``marker`` (consumed with it), within the line-length limit."""
        start = 0
        while True:
            end = self.buf.find(marker, start)
            if end >= 0:
                found = bytes(self.buf[:end])
                del self.buf[: end + len(marker)]
                return found
            if len(self.buf) > _MAX_LINE:
                raise ProtocolError(f"no {marker!r} within {_MAX_LINE} bytes")
            start = max(0, len(self.buf) - len(marker) + 1)
            self._fill()

    def _read_head(self) -> tuple[str, int, dict[str, str]]:
        lines = self._read_until(b"\r\n\r\n").split(b"\r\n")
        status_line = lines[0].decode("latin-1")
        version, _, rest = status_line.partition(" ")
        code = rest[:3]
        if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not code.isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:60]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise ProtocolError(f"malformed header line: {line[:60]!r}")
            key, text = name.decode("latin-1").lower(), value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        return version, int(code), headers

    def _read_exact(self, size: int) -> bytes:
        while len(self.buf) < size:
            self._fill()
        if len(self.buf) == size:
            body = bytes(self.buf)
            self.buf.clear()
            return body
        with memoryview(self.buf) as view:
            body = bytes(view[:size])
        del self.buf[:size]
        return body

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size_text = self._read_until(b"\r\n").split(b";", 1)[0].strip()
            if not size_text or not _HEX.issuperset(size_text):
                raise ProtocolError(f"bad chunk size line: {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            parts.append(self._read_exact(size))
            if self._read_exact(2) != b"\r\n":
                raise ProtocolError("a chunk is not followed by CRLF")
        while self._read_until(b"\r\n"):  # trailer fields, up to the empty line
            pass
        return b"".join(parts)

    def _read_to_eof(self) -> bytes:
        while True:
            data = self._recv(_RECV_SIZE)
            if not data:
                break
            self.received += len(data)
            self.buf += data
        body = bytes(self.buf)
        self.buf.clear()
        return body


def _content_length(raw: str) -> int:
    values = {v.strip() for v in raw.split(",")}  # a repeated header must repeat the same value
    if len(values) != 1:
        raise ProtocolError(f"conflicting content-length {raw!r}")
    value = values.pop()
    if not value.isdigit():
        raise ProtocolError(f"bad content-length {raw!r}")
    return int(value)


class _Connection:
    """One socket and its reader; used by one thread at a time (checked out of the pool)."""

    __slots__ = ("_armed", "_deadline", "_timeout", "reader", "reused", "sock")

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.reader = ResponseReader(self._recv)
        self.reused = False
        self._timeout = timeout  # per read
        self._deadline = 0.0  # monotonic time by which the current answer must be complete
        self._armed = -1.0  # the socket's timeout as last set

    def exchange(self, request: bytes, deadline: float) -> Response:
        """Send ``request`` and read its answer, all of it before ``deadline`` (monotonic)."""
        self.reader.received = 0
        self._deadline = deadline
        try:
            self._arm()
            self.sock.sendall(request)
            return self.reader.read_response()
        except TimeoutError as exc:  # plain sockets say "timed out", TLS ones "The read operation..."
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"no complete answer by the deadline ({self.reader.received} bytes received)"
                ) from exc
            raise TimeoutError(f"no answer within the read timeout of {self._timeout:g} s") from exc

    def _arm(self) -> None:
        """Set the timeout of the next socket operation: the per-read one, cut at the deadline.

        ``settimeout`` is a system call; it is skipped while the value would change by less than
        0.1 s, which is what a fast answer sees (the deadline is then kept to within 0.1 s).
        """
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        timeout = min(self._timeout, left)
        if not -_REARM < timeout - self._armed < _REARM:
            self.sock.settimeout(timeout)
            self._armed = timeout

    def _recv(self, size: int) -> bytes:
        self._arm()
        return self.sock.recv(size)

    def looks_idle(self) -> bool:
        """Nothing is waiting to be read: a kept connection the server closed reads as EOF."""
        if self.reader.buf or (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
            return False
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        return not poller.poll(0)

    def close(self) -> None:
        self.sock.close()


class Transport:
    """Thread-safe GETs over a small pool of kept-alive connections to one server.

    Construction reads the TLS files but opens no connection; connections are made on demand, one
    per concurrent caller, and at most ``max_idle`` are kept between calls.
    """

    def __init__(
        self,
        settings: TransportSettings,
        *,
        connect_timeout: float,
        timeout: float,
        deadline: float | None = None,
        max_idle: int = 16,
    ) -> None:
        self.settings = settings
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        #: seconds one GET may take in all (connect, send, every byte of the answer)
        self.deadline = deadline if deadline is not None else connect_timeout + timeout
        self.max_idle = max_idle
        self.connections_opened = 0  # for tests and debugging: how often a new socket was needed
        self._tls = settings.tls_context()
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def get(self, target: str, headers: Mapping[str, str]) -> Response:
        """GET ``target`` (path and query, already encoded) with ``headers``; any status is returned.

        Raises ``OSError`` (refused, reset, ``TimeoutError``: also when the whole answer was not
        there within ``deadline`` seconds), ``ssl.SSLError`` or :class:`ProtocolError` when no
        complete answer came.
        """
        request = self._request(target, headers)
        deadline = time.monotonic() + self.deadline
        try:
            conn = self._checkout(deadline)
            try:
                try:
                    response = conn.exchange(request, deadline)
                except (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
                    conn.close()
                    if not conn.reused or conn.reader.received:
                        raise
                    self._drop_idle()  # the server closed one idle connection: likely the older ones
                    conn = self._connect(deadline)
                    response = conn.exchange(request, deadline)
            except BaseException:
                conn.close()
                raise
        except TimeoutError as exc:
            if time.monotonic() < deadline:
                raise  # a connect or per-read timeout, its message says which
            raise TimeoutError(f"GET exceeded its deadline of {self.deadline:g} s: {exc}") from exc
        self._checkin(conn, response.keep_alive)
        return response

    def close(self) -> None:
        """Close the kept connections; ones in use are closed when they come back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- internals -------------------------------------------------------------------------------
    def _request(self, target: str, headers: Mapping[str, str]) -> bytes:
        path = self.settings.base_path + target
        if not path.startswith("/") or _CONTROL_OR_SPACE.search(path):
            raise ValueError(f"invalid request target {target!r}")
        lines = [f"GET {path} HTTP/1.1", f"Host: {self.settings.host_header}"]
        for name, value in headers.items():
            if _CONTROL_OR_SPACE.search(name) or _CONTROL.search(value):
                raise ValueError(f"invalid header {name!r}: control characters are not allowed")
            lines.append(f"{name}: {value}")
        lines.append("\r\n")
        return "\r\n".join(lines).encode("latin-1")

    def _checkout(self, deadline: float) -> _Connection:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(deadline)
            if conn.looks_idle():
                conn.reused = True
                return conn
            conn.close()

    def _checkin(self, conn: _Connection, keep: bool) -> None:
        with self._lock:
            if keep and not self._closed and len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def _drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _connect(self, deadline: float) -> _Connection:
        settings = self.settings
        timeout = min(self.connect_timeout, deadline - time.monotonic())
        if timeout <= 0:
            raise TimeoutError("no time left to connect")
        try:
            sock = socket.create_connection((settings.host, settings.port), timeout=timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for level, option, value in settings.socket_options:
                    sock.setsockopt(level, option, value)
                if self._tls is not None:  # the handshake runs under the connect timeout
                    sock = self._tls.wrap_socket(
                        sock, server_hostname=settings.server_hostname or settings.host
                    )
            except BaseException:
                sock.close()
                raise
        except TimeoutError as exc:
            raise TimeoutError(f"connect timed out after {timeout:g} s") from exc
        with self._lock:
            self.connections_opened += 1
        return _Connection(sock, self.timeout)
