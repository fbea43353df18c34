"""A small keep-alive pool of stdlib ``http.client`` connections: every call of the apiserver client.

Why it exists: one claim GET through the official client costs about 1 ms of our CPU, most of it
decoding the answer into the client's models, not HTTP; these reads want the JSON dict. The claim
status apply (a PATCH, answered with the claim) cost 0.95 ms of CPU through the official client's
``call_api`` with the answer undecoded, 0.52 ms here (a claim GET here: 0.30 ms; real
kube-apiserver over TLS, interleaved, issue 15): the difference is the client's serializer and
urllib3's request and response machinery. The HTTP itself is ``http.client``'s since issue 15; it
costs more than the hand-written HTTP/1.1 parser this module used to carry, and is one parser fewer
to own and get wrong. Our CPU per claim GET on a kept-alive connection to the fake apiserver, both
pools interleaved in one run: 37 us for the old parser vs 77 us for ``http.client`` (issue 15's
measurement); 76 vs 131 us (1.7x) for this module against the old one on a loaded 2-core machine.
The socket handling (pool, deadline, retry) stays ours:

* :func:`settings_from_configuration` takes the host, TLS and socket settings from the official
  client's ``Configuration`` and raises :class:`UnsupportedConfigError` for anything it cannot
  honour (a proxy, a certificate name override, client-go style retries), so that the caller falls
  back to the official client instead of silently dropping a setting.
* The settings of a pod come from :mod:`driver.kube.incluster` instead, with no official client.
* Authorization is the caller's: it passes the headers of each request, read through the
  Configuration's own ``auth_settings()`` (token refresh hooks keep working) or the service
  account's token file.
* A watch (:meth:`Transport.stream`) gets a connection of its own and reads its answer line by
  line as it comes, every read waiting up to the watch's own limit; :meth:`Stream.close` ends it
  from another thread.
* Connections are pooled last-in first-out (the warmest first), at most ``max_idle`` kept. An
  idempotent request (a GET; a server-side apply, whose second application of the same body
  changes nothing) that fails on a reused connection before any byte of the answer arrived (the
  server closed it while it sat idle) is sent once more on a fresh connection. A request the
  caller does not declare idempotent is never resent: the server may have acted on it.
* Every request has an overall deadline besides the per-read timeout. A per-read timeout alone is
  reset by every byte, so an apiserver (or a proxy in front of it) that trickles one byte a
  second held a prepare call for minutes, past the kubelet's 45 s. ``http.client`` reads through
  a buffered file over the socket; ours is one whose every ``recv`` waits at most until the
  deadline. ``http.client`` itself skips ``100 Continue`` answers without limit (and takes any
  other 1xx for the final answer); here at most ``_MAX_INTERIM`` interim answers of any 1xx kind
  are skipped, then the read fails, long before the deadline.

Failures are plain exceptions (the ``OSError`` family, :class:`ProtocolError`); the caller maps
them to :class:`~driver.errors.KubeError` in one place.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import re
import select
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "ConnectionClosedError",
    "ProtocolError",
    "Response",
    "Stream",
    "Transport",
    "TransportSettings",
    "UnsupportedConfigError",
    "configuration_key",
    "settings_from_configuration",
]

_RECV_SIZE = 65536
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # never allowed in a header value
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")  # never allowed in a request target
#: interim (1xx) answers read before the real one; a request gets none in practice (none sends
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


class _DeadlineRecv(io.RawIOBase):
    """The connection's socket as a raw stream whose every ``recv`` ends by the deadline."""

    def __init__(self, conn: _Connection) -> None:
        super().__init__()
        self._conn = conn

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        conn = self._conn
        conn.arm()
        count = conn.sock.recv_into(buffer)
        conn.received += count
        conn.eof = conn.eof or not count
        return count


class _Answer(http.client.HTTPResponse):
    """``http.client``'s response, skipping at most ``_MAX_INTERIM`` interim 1xx answers."""

    _status_lines = 0

    def _read_status(self) -> tuple[str, int, str]:
        while True:
            self._status_lines += 1
            if self._status_lines > _MAX_INTERIM + 1:
                raise ProtocolError(f"more than {_MAX_INTERIM} interim 1xx answers and no final one")
            version, status, reason = super()._read_status()  # type: ignore[misc]
            if status in (100, 101) or status >= 200:  # begin() skips a 100's head itself
                return str(version), int(status), str(reason)
            http.client.parse_headers(self.fp)  # 102, 103...: skip its head, read on


class _Client(http.client.HTTPConnection):
    """``http.client``'s connection, writing a request's head and body together.

    ``http.client`` sends them in two writes: two TLS records and two system calls for every
    status apply, where one does.
    """

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        buffered: list[bytes] = self._buffer  # type: ignore[attr-defined]
        buffered.extend((b"", b""))
        head = b"\r\n".join(buffered)
        del buffered[:]
        self.send(head + bytes(message_body) if message_body else head)


class _Wire:
    """What ``http.client`` sees as its socket: sends and reads go through :meth:`_Connection.arm`.

    Its ``close`` does nothing (``http.client`` closes "its socket" on ``Connection: close`` before
    the body is read); the pool closes the real socket.
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: _Connection) -> None:
        # a weak reference: no cycle, so a dropped pool's sockets close at once, not at the next GC
        self._conn = weakref.proxy(conn)

    def sendall(self, data: bytes) -> None:
        self._conn.arm()
        self._conn.sock.sendall(data)

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineRecv(self._conn), _RECV_SIZE)

    def close(self) -> None:
        """Nothing: the connection's life is the pool's."""


class _Connection:
    """One socket and the ``http.client`` connection speaking over it; one thread at a time."""

    __slots__ = (
        "__weakref__",
        "_armed",
        "_deadline",
        "_timeout",
        "eof",
        "http",
        "received",
        "reused",
        "sock",
    )

    def __init__(self, sock: socket.socket, settings: TransportSettings, timeout: float) -> None:
        self.sock = sock
        self.reused = False
        self.received = 0  # bytes of the current answer so far (the retry rule needs it)
        self.eof = False  # the server closed its side during the current answer
        self._timeout = timeout  # per read
        self._deadline = 0.0  # monotonic time by which the current answer must be complete
        self._armed = -1.0  # the socket's timeout as last set
        self.http = _Client(settings.host, settings.port)
        self.http.auto_open = 0  # never reconnect behind the pool's back
        self.http.response_class = _Answer
        self.http.sock = _Wire(self)

    def start(
        self, method: str, path: str, host: str, headers: Mapping[str, str], *, body: bytes, deadline: float
    ) -> tuple[http.client.HTTPResponse, dict[str, str]]:
        """Send one request and read the head of its answer (status and fields) by ``deadline``."""
        self.received, self.eof = 0, False
        self._deadline = deadline
        with self.translated(deadline):
            conn = self.http
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", host)
            for name, value in headers.items():
                conn.putheader(name, value)
            if body or method != "GET":
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            answer = conn.getresponse()
            if self.eof:  # http.client takes a head cut off by EOF for a whole one
                raise http.client.IncompleteRead(b"")
            if answer.status == 101:
                raise ProtocolError("the server switched protocols")
            fields: dict[str, str] = {}
            for name, value in answer.getheaders():
                key = name.lower()
                fields[key] = f"{fields[key]}, {value}" if key in fields else value
            encoding = fields.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":
                raise ProtocolError(f"content-encoding {encoding!r} was not asked for")
            codings = [c.strip().lower() for c in fields.get("transfer-encoding", "").split(",") if c.strip()]
            if codings and codings != ["chunked"]:
                raise ProtocolError(f"transfer-encoding {fields['transfer-encoding']!r}")
            return answer, fields

    def exchange(
        self, method: str, path: str, host: str, headers: Mapping[str, str], *, body: bytes, deadline: float
    ) -> Response:
        """Send one request and read its answer, all of it before ``deadline`` (monotonic)."""
        answer, fields = self.start(method, path, host, headers, body=body, deadline=deadline)
        with self.translated(deadline):
            data = answer.read()
        return Response(answer.status, data, fields, not answer.will_close)

    @contextlib.contextmanager
    def translated(self, deadline: float) -> Iterator[None]:
        """``http.client``'s exceptions as this module's: what went wrong, in words that say so."""
        try:
            yield
        except TimeoutError as exc:  # plain sockets say "timed out", TLS ones "The read operation..."
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"no complete answer by the deadline ({self.received} bytes received)"
                ) from exc
            raise TimeoutError(f"no answer within the read timeout of {self._timeout:g} s") from exc
        except http.client.RemoteDisconnected as exc:
            raise ConnectionClosedError("the server closed the connection without answering") from exc
        except http.client.IncompleteRead as exc:
            raise ConnectionClosedError(
                f"the server closed the connection {self.received} bytes into the answer"
            ) from exc
        except http.client.HTTPException as exc:  # bad status line, a line or head too long...
            raise ProtocolError(f"{type(exc).__name__}: {exc}"[:200]) from exc

    def arm(self) -> None:
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

    def looks_idle(self) -> bool:
        """Nothing is waiting to be read: a kept connection the server closed reads as EOF."""
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return False
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        return not poller.poll(0)

    def close(self) -> None:
        self.sock.close()


class Stream:
    """An answer read line by line as it comes (a watch), on a connection of its own.

    :meth:`close` may be called from any thread: it shuts the socket down, so a read blocked in
    another thread returns at once (that read then ends or raises; the caller knows it closed).
    """

    def __init__(
        self, conn: _Connection, answer: http.client.HTTPResponse, fields: dict[str, str], deadline: float
    ) -> None:
        self.status = answer.status
        self.headers: Mapping[str, str] = fields
        self._conn = conn
        self._answer = answer
        self._deadline = deadline
        self._closed = False

    def readline(self, limit: int = 16 << 20) -> bytes:
        """The next line with its newline; ``b""`` once the server ended the answer.

        ``limit`` bounds one line (a watch event is one object; 16 MiB is far above the 3 MiB an
        etcd value may hold), so a server that never sends a newline cannot fill the memory.
        """
        with self._conn.translated(self._deadline):
            line = self._answer.readline(limit + 1)
        if len(line) > limit:
            raise ProtocolError(f"a line of the answer is longer than {limit} bytes")
        return line

    def read(self) -> bytes:
        """The rest of the answer (an error's Status object)."""
        with self._conn.translated(self._deadline):
            return self._answer.read()

    def close(self) -> None:
        """End the answer and the connection (idempotent, thread-safe)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._conn.sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()


class Transport:
    """Thread-safe requests over a small pool of kept-alive connections to one server.

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
        #: seconds a request may take in all (connect, send, every byte of the answer), unless the
        #: call names its own
        self.deadline = deadline if deadline is not None else connect_timeout + timeout
        self.max_idle = max_idle
        self.connections_opened = 0  # for tests and debugging: how often a new socket was needed
        self._tls = settings.tls_context()
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def get(self, target: str, headers: Mapping[str, str], *, deadline: float | None = None) -> Response:
        """GET ``target`` (path and query, already encoded) with ``headers``; any status is returned.

        Raises ``OSError`` (refused, reset, ``TimeoutError``: also when the whole answer was not
        there within ``deadline`` seconds, :attr:`deadline` by default), ``ssl.SSLError`` or
        :class:`ProtocolError` when no complete answer came.
        """
        return self.request("GET", target, headers, idempotent=True, deadline=deadline)

    def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes = b"",
        *,
        idempotent: bool,
        deadline: float | None = None,
    ) -> Response:
        """Send ``method`` to ``target`` with ``headers`` and ``body``; any status is returned.

        ``idempotent`` says that sending the request twice does what sending it once does (a GET;
        a server-side apply of one body): only then is it resent, once, when a reused connection
        turns out to have been closed by the server before any byte of the answer came. Raises
        as :meth:`get` does.
        """
        if _CONTROL_OR_SPACE.search(method):
            raise ValueError(f"invalid method {method!r}")
        path = self._path(target, headers)
        host = self.settings.host_header
        limit = self.deadline if deadline is None else deadline
        ends = time.monotonic() + limit
        try:
            conn = self._checkout(ends)
            try:
                try:
                    response = conn.exchange(method, path, host, headers, body=body, deadline=ends)
                except (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
                    conn.close()
                    if not idempotent or not conn.reused or conn.received:
                        raise
                    self._drop_idle()  # the server closed one idle connection: likely the older ones
                    conn = self._connect(ends)
                    response = conn.exchange(method, path, host, headers, body=body, deadline=ends)
            except BaseException:
                conn.close()
                raise
        except TimeoutError as exc:
            if time.monotonic() < ends:
                raise  # a connect or per-read timeout, its message says which
            raise TimeoutError(f"{method} exceeded its deadline of {limit:g} s: {exc}") from exc
        self._checkin(conn, response.keep_alive)
        return response

    def stream(self, target: str, headers: Mapping[str, str], *, deadline: float) -> Stream:
        """GET ``target`` on a connection of its own and hand back the answer to read as it comes.

        For a watch: the server sends events for as long as the watch lasts, with silences between
        them, so every read may wait up to ``deadline`` seconds and the whole answer may take as
        long (the caller asks the server to end it sooner). The head must come by then too; the
        connection never goes back to the pool.
        """
        path = self._path(target, headers)
        ends = time.monotonic() + deadline
        conn = self._connect(ends, read_timeout=deadline)
        try:
            answer, fields = conn.start(
                "GET", path, self.settings.host_header, headers, body=b"", deadline=ends
            )
        except BaseException:
            conn.close()
            raise
        return Stream(conn, answer, fields, ends)

    def close(self) -> None:
        """Close the kept connections; ones in use are closed when they come back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- internals -------------------------------------------------------------------------------
    def _path(self, target: str, headers: Mapping[str, str]) -> str:
        """The request path; raises ValueError for control characters anywhere in the request
        (a token file's newline must never split a header), before anything is sent."""
        path = self.settings.base_path + target
        if not path.startswith("/") or _CONTROL_OR_SPACE.search(path):
            raise ValueError(f"invalid request target {target!r}")
        for name, value in headers.items():
            if _CONTROL_OR_SPACE.search(name) or _CONTROL.search(value):
                raise ValueError(f"invalid header {name!r}: control characters are not allowed")
        return path

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

    def _connect(self, deadline: float, *, read_timeout: float | None = None) -> _Connection:
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
        return _Connection(sock, settings, self.timeout if read_timeout is None else read_timeout)
