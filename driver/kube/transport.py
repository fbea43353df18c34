"""Every apiserver request of the driver: a small pool of kept-alive HTTP/1.1 connections.

Why this shape (figures: bench/README.md, ``bench/transport.py``): a claim GET is on every
prepare, and the standard library's ``http.client`` spent more CPU reading an answer's head
(through the ``email`` package) than TLS spent on the whole exchange. So the answers are read by
``httptools`` (the llhttp parser, compiled; strict about framing), the request head is written
here in one piece, and the sockets are the standard library's. What this module adds, and why
it exists at all:

* One deadline per request, through every phase: the TCP connect, a proxy's ``CONNECT`` reply,
  the TLS handshake, sending, the answer's head and body. A per-read timeout alone is reset by
  every byte, so a server or a proxy that trickles a byte a second held a prepare call for
  minutes. The sockets of :mod:`driver.kube.deadline` cut every wait at the deadline; the
  connection is opened here too (not by ``http.client``, whose tunnel read the proxy's reply with
  per-read timeouts only and without a bound on its header lines).
* Bounded heads and answers: every head (a proxy's ``CONNECT`` reply, interim ``1xx`` answers
  included) may take at most ``MAX_HEAD`` bytes and ``MAX_FIELDS`` fields, a body ``max_body``
  bytes, a watch line a limit of its own. An interim answer other than ``100 Continue`` is
  refused: nobody here asks for one.
* Complete answers only: an answer the server's EOF cuts off before its framing says it is over
  (a sized body short of its length, a chunked one without its last chunk) raises
  :class:`ConnectionClosedError`, never a shorter body.
* Resending only what is safe: an idempotent request (a GET; a server-side apply of one body)
  that fails on a reused connection before any byte of the answer arrived (the server closed it
  while it sat idle) is sent once more on a fresh connection; a request the caller does not
  declare idempotent is never resent, the server may have acted on it.
* A watch (:meth:`Transport.stream`) reads line by line on a connection of its own, may be closed
  from another thread, and tells an end from a cut.
* A proxy is a ``CONNECT`` tunnel (:mod:`driver.kube.proxy` decides which); only its ``200``
  opens it, and a byte it sends past its reply, before the server may speak, is refused.

Connections are pooled last-in first-out (the warmest first), at most ``max_idle`` kept; one
that the server closed while idle is noticed at checkout. Failures are plain exceptions (the
``OSError`` family, :class:`ProtocolError`); :mod:`driver.kube.client` maps them to
:class:`~driver.errors.KubeError` in one place.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import httptools

from driver.kube.deadline import Deadline, PacedSocket, PacedTlsSocket, open_tcp, start_tls
from driver.kube.proxy import Proxy

__all__ = [
    "MAX_FIELDS",
    "MAX_HEAD",
    "ConnectionClosedError",
    "ProtocolError",
    "Response",
    "Stream",
    "Transport",
    "TransportSettings",
]

#: bytes an answer's head may take, interim answers included: far above an apiserver's heads
MAX_HEAD = 256 * 1024
#: fields an answer's head may have (an apiserver sends about ten)
MAX_FIELDS = 100
#: bytes a body may take unless the transport says otherwise: far above a page of claims or a
#: node's slices, far below what hurts the pod
DEFAULT_MAX_BODY = 64 * 1024 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # never allowed in a header value
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")  # never allowed in a method, target or name
#: bytes asked of the socket per read
_READ_SIZE = 64 * 1024
#: statuses whose answers never have a body
_NO_BODY = frozenset({204, 304})


class ProtocolError(Exception):
    """The server's answer is not the HTTP/1.1 this transport reads, or breaks one of its bounds."""


class ConnectionClosedError(ConnectionError):
    """The server closed the connection before the answer was complete."""


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """Where to connect and how, as plain values (see driver/kube/incluster.py and kubeconfig.py)."""

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
    proxy: Proxy | None = None  # tunnel through this HTTP proxy

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
        ctx.sslsocket_class = PacedTlsSocket
        return ctx


@dataclass(frozen=True, slots=True)
class Response:
    """One complete answer; ``keep_alive`` says whether the connection may carry another request."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case
    keep_alive: bool = True


class _AfterTheEndError(Exception):
    """Raised in a parser callback to stop at the end of the answer."""


class _Answer:
    """One answer as the parser reads it: ``httptools`` calls the ``on_*`` methods.

    The callbacks enforce the bounds as the bytes come: the field count, the body size, no
    interim answer but ``100 Continue``, no content or transfer coding nobody asked for. An
    error raised in a callback stops the parser; :meth:`feed` re-raises it as it was.
    """

    __slots__ = (
        "body",
        "complete",
        "extra",
        "field_count",
        "fields",
        "head_done",
        "interim",
        "max_body",
        "parser",
        "reusable",
        "started",
        "status",
    )

    def __init__(self, max_body: int) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.max_body = max_body
        self.status = 0
        self.fields: dict[str, str] = {}  # names in lower case, repeats joined
        self.field_count = 0  # field lines of the head being read
        self.body = bytearray()
        self.started = False  # a status line was read
        self.head_done = False  # the final answer's head was read
        self.interim = False  # inside a 100 Continue
        self.complete = False  # the final answer was read to its end
        self.extra = False  # bytes came after the end: the connection cannot carry another request
        self.reusable = False  # the parser's keep-alive verdict, taken at the end (it resets after)

    def feed(self, data: memoryview) -> None:
        """Parse the next bytes of the answer."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _AfterTheEndError):
                return
            if isinstance(exc.__context__, ProtocolError):
                raise exc.__context__ from None
            raise ProtocolError(f"malformed answer: {exc}") from exc
        except httptools.HttpParserUpgrade as exc:
            raise ProtocolError("the server switched protocols") from exc
        except httptools.HttpParserError as exc:
            if self.complete:  # garbage after a complete answer: keep the answer, drop the connection
                self.extra = True
                return
            if not self.started:
                raise ProtocolError(f"BadStatusLine: not an HTTP/1.x status line ({exc})") from exc
            raise ProtocolError(f"malformed answer: {exc}") from exc

    @property
    def framed(self) -> bool:
        """The head says where the body ends (a length or chunks), not the connection's end."""
        return "content-length" in self.fields or "chunked" in self.fields.get("transfer-encoding", "")

    @property
    def keep_alive(self) -> bool:
        """The connection may carry another request: the answer ended by its framing, the server
        did not ask to close, and nothing came after the end."""
        return self.complete and self.reusable and not self.extra

    @property
    def ends_with_connection(self) -> bool:
        """The body ends where the connection does (no length, no chunks, a status with a body)."""
        return self.head_done and not self.framed and self.status not in _NO_BODY

    # -- httptools callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.complete:  # a second answer nobody asked for: stop reading, retire the connection
            self.extra = True
            raise _AfterTheEndError

    def on_status(self, reason: bytes) -> None:
        self.started = True

    def on_header(self, name: bytes, value: bytes) -> None:
        self.started = True
        self.field_count += 1
        if self.field_count > MAX_FIELDS:
            raise ProtocolError(f"got more than {MAX_FIELDS} headers")
        fields = self.fields
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        fields[key] = f"{fields[key]}, {text}" if key in fields else text

    def on_headers_complete(self) -> None:
        self.started = True
        status = self.parser.get_status_code()
        if status < 200:
            if status == 101:
                raise ProtocolError("the server switched protocols")
            if status != 100:
                raise ProtocolError(f"an interim answer ({status}) where the final one was due")
            self.fields, self.field_count, self.interim = {}, 0, True
            return
        fields = self.fields
        encoding = fields.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            raise ProtocolError(f"content-encoding {encoding!r} was not asked for")
        codings = [c.strip().lower() for c in fields.get("transfer-encoding", "").split(",") if c.strip()]
        if codings and codings != ["chunked"]:
            raise ProtocolError(f"transfer-encoding {fields['transfer-encoding']!r}")
        if codings:
            fields["transfer-encoding"] = "chunked"
        self.status, self.head_done = status, True

    def on_body(self, data: bytes) -> None:
        body = self.body
        body += data
        if len(body) > self.max_body:
            raise ProtocolError(f"the answer's body is over {self.max_body} bytes")

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
        elif self.head_done:
            self.complete = True
            self.reusable = self.parser.should_keep_alive()


class _Connection:
    """One pooled connection: its paced socket, whether it served before, a read buffer."""

    __slots__ = ("buffer", "reused", "sock")

    def __init__(self, sock: PacedSocket | PacedTlsSocket) -> None:
        self.sock = sock
        self.reused = False
        self.buffer = bytearray(_READ_SIZE)

    def start(
        self,
        head: bytes,
        body: bytes,
        *,
        deadline: Deadline,
        read_timeout: float,
        max_body: int,
        phase: str = "answer",
        per_op_name: str = "read timeout",
    ) -> _Answer:
        """Send one request and read its answer's head (status and fields) by ``deadline``,
        each wait at most ``read_timeout``; the head is bounded (``MAX_HEAD``, ``MAX_FIELDS``)."""
        sock = self.sock
        sock.pace(deadline, read_timeout, phase, per_op_name)
        sock.sendall(head + body if body else head)  # one write: one TLS record, one segment
        answer = _Answer(max_body)
        while not answer.head_done:  # reads stop at the bound: a head that passes it never ends
            left = MAX_HEAD + 1 - sock.received
            if left <= 0:
                raise ProtocolError(f"the {phase}'s head (interim answers included) is over {MAX_HEAD} bytes")
            self.read_some(answer, min(left, _READ_SIZE))
        return answer

    def read_some(self, answer: _Answer, size: int = _READ_SIZE) -> None:
        """Feed the parser what the socket has next (at most ``size`` bytes); at the server's EOF,
        end the answer if its framing is the connection's end, else raise
        :class:`ConnectionClosedError`."""
        count = self.sock.recv_into(self.buffer, size)
        if count:
            answer.feed(memoryview(self.buffer)[:count])
            return
        received = self.sock.received
        if not received:
            raise ConnectionClosedError("the server closed the connection without answering")
        if answer.ends_with_connection:
            answer.complete = True  # a body framed by the connection's end has no other end
            return
        raise ConnectionClosedError(f"the server closed the connection {received} bytes into the answer")

    def read_rest(self, answer: _Answer) -> None:
        """Read the answer to its end."""
        while not answer.complete:
            self.read_some(answer)

    def looks_idle(self) -> bool:
        """Nothing is waiting to be read: a kept connection the server closed reads as EOF."""
        sock = self.sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    def close(self) -> None:
        self.sock.close()


class Stream:
    """An answer read line by line as it comes (a watch), on a connection of its own.

    :meth:`close` may be called from any thread: it shuts the socket down, so a read blocked in
    another thread returns at once (that read then ends or raises; the caller knows it closed).
    """

    def __init__(self, conn: _Connection, answer: _Answer) -> None:
        self.status = answer.status
        self.headers: Mapping[str, str] = answer.fields
        self._conn = conn
        self._answer = answer
        self._closed = False

    def readline(self, limit: int = 16 << 20) -> bytes:
        """The next line with its newline; ``b""`` once the server ended the answer properly.

        ``limit`` bounds one line (a watch event is one object; the default is far above the
        largest value etcd stores), so a server that never sends a newline cannot fill the memory. An
        answer that stops before its end (a chunked one without its last chunk, a sized one short
        of its length) raises :class:`ConnectionClosedError`.
        """
        answer = self._answer
        pending = answer.body
        searched = 0
        while True:
            end = pending.find(b"\n", searched)
            if end >= 0:
                if end >= limit:
                    break
                line = bytes(pending[: end + 1])
                del pending[: end + 1]
                return line
            if len(pending) > limit:
                break
            if answer.complete:
                line = bytes(pending)
                pending.clear()
                return line
            searched = len(pending)
            try:
                self._conn.read_some(answer)
            except (OSError, ProtocolError):
                if self._closed:
                    return b""
                raise
            if self._closed:
                return b""
        raise ProtocolError(f"a line of the answer is longer than {limit} bytes")

    def read(self, limit: int = DEFAULT_MAX_BODY) -> bytes:
        """The rest of the answer (an error's Status object), at most ``limit`` bytes."""
        answer = self._answer
        while not answer.complete and len(answer.body) < limit:
            self._conn.read_some(answer)
        rest = bytes(answer.body[:limit])
        answer.body.clear()
        return rest

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
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        self.settings = settings
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        #: seconds a request may take in all (connect, send, every byte of the answer), unless the
        #: call names its own
        self.deadline = deadline if deadline is not None else connect_timeout + timeout
        self.max_idle = max_idle
        self.max_body = max_body
        self._tls = settings.tls_context()
        self._host_line = f"\r\nHost: {settings.host_header}\r\n"
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self._closed = False

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
        """Send ``method`` to ``target`` (path and query, encoded) with ``headers`` and ``body``.

        Any status is returned. ``idempotent`` says that sending the request twice does what
        sending it once does (a GET; a server-side apply of one body): only then is it resent,
        once, when a reused connection turns out to have been closed by the server before any
        byte of the answer came. Raises ``OSError`` (refused, reset, ``TimeoutError``: also when
        the whole answer was not there within ``deadline`` seconds, :attr:`deadline` by default),
        ``ssl.SSLError`` or :class:`ProtocolError` when no complete answer came.
        """
        if method == "HEAD" or _CONTROL_OR_SPACE.search(method) or not method.isascii():
            raise ValueError(f"invalid method {method!r}")
        head = self._head(method, target, headers, body)
        limit = self.deadline if deadline is None else deadline
        ends = Deadline(limit)
        try:
            conn = self._checkout(ends)
            try:
                try:
                    response = self._exchange(conn, head, body, ends)
                except (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
                    conn.close()
                    if not idempotent or not conn.reused or conn.sock.received:
                        raise
                    self._drop_idle()  # the server closed one idle connection: likely the older ones
                    conn = self._connect(ends)
                    response = self._exchange(conn, head, body, ends)
            except BaseException:
                conn.close()
                raise
        except TimeoutError as exc:
            if not ends.over():
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
        head = self._head("GET", target, headers, b"")
        ends = Deadline(deadline)
        conn = self._connect(ends)
        try:
            answer = conn.start(head, b"", deadline=ends, read_timeout=deadline, max_body=1 << 62)
        except BaseException:
            conn.close()
            raise
        return Stream(conn, answer)

    def close(self) -> None:
        """Close the kept connections; ones in use are closed when they come back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- internals -------------------------------------------------------------------------------
    def _exchange(self, conn: _Connection, head: bytes, body: bytes, ends: Deadline) -> Response:
        """One request and its whole answer, by ``ends``."""
        answer = conn.start(head, body, deadline=ends, read_timeout=self.timeout, max_body=self.max_body)
        conn.read_rest(answer)
        return Response(answer.status, bytes(answer.body), answer.fields, answer.keep_alive)

    def _head(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> bytes:
        """The request's head, in bytes; raises ValueError for control characters anywhere in
        the request (a token file's newline must never split a header), before anything is sent.
        No ``Accept-Encoding``: the answers come uncompressed."""
        path = self.settings.base_path + target
        if not path.startswith("/") or _CONTROL_OR_SPACE.search(path) or not path.isascii():
            raise ValueError(f"invalid request target {target!r}")
        lines = [method, " ", path, " HTTP/1.1", self._host_line]
        for name, value in headers.items():
            if _CONTROL_OR_SPACE.search(name) or ":" in name or not name or _CONTROL.search(value):
                raise ValueError(f"invalid header {name!r}: control characters are not allowed")
            lines += (name, ": ", value, "\r\n")
        if body or method != "GET":
            lines += ("Content-Length: ", str(len(body)), "\r\n")
        lines.append("\r\n")
        try:
            return "".join(lines).encode("latin-1")
        except UnicodeEncodeError as exc:
            raise ValueError(f"invalid header: {exc.reason}") from exc

    def _checkout(self, deadline: Deadline) -> _Connection:
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

    def _connect(self, deadline: Deadline) -> _Connection:
        """A new connection, by ``deadline``: TCP connect, the proxy's tunnel, the TLS handshake;
        each wait at most :attr:`connect_timeout`."""
        settings, per_op = self.settings, self.connect_timeout
        proxy = settings.proxy
        host, port = (proxy.host, proxy.port) if proxy else (settings.host, settings.port)
        sock = open_tcp(host, port, deadline, per_op)
        try:
            for level, option, value in settings.socket_options:
                sock.setsockopt(level, option, value)
            if proxy is not None:
                _tunnel(_Connection(sock), settings, proxy, deadline, per_op)
        except BaseException:
            sock.close()
            raise
        if self._tls is None:
            return _Connection(sock)
        name = settings.server_hostname or settings.host
        return _Connection(start_tls(sock, self._tls, name, deadline, per_op))


def _tunnel(
    conn: _Connection, settings: TransportSettings, proxy: Proxy, deadline: Deadline, per_op: float
) -> None:
    """Open a ``CONNECT`` tunnel to the server through the proxy on ``conn``, by ``deadline``.

    The proxy's reply is a head like any answer's, read under the same bounds; only a ``200``
    opens the tunnel, and the proxy may send nothing past its reply (the server speaks only after
    the client, in HTTP and in TLS alike), so a byte there is refused rather than taken as the
    server's.
    """
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    target = f"{host}:{settings.port}"
    if _CONTROL_OR_SPACE.search(target):
        raise ValueError(f"invalid CONNECT target {target!r}")
    lines = [f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"]
    for name, value in proxy.tunnel_headers().items():
        if _CONTROL.search(value):
            raise ValueError(f"invalid header {name!r} for the proxy: control characters are not allowed")
        lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    reply = conn.start(
        "".join(lines).encode("latin-1"),
        b"",
        deadline=deadline,
        read_timeout=per_op,
        max_body=MAX_HEAD,
        phase="proxy CONNECT reply",
        per_op_name="connect timeout",
    )
    if reply.status != 200:
        raise OSError(f"Tunnel connection failed: {reply.status} (proxy {proxy.host}:{proxy.port})")
    if reply.body:
        raise ProtocolError(f"the proxy sent {len(reply.body)} bytes past its CONNECT reply")
