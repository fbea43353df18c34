"""Every apiserver request of the driver: a small pool of kept-alive ``http.client`` connections.

Why this shape (figures: bench/README.md, ``bench/transport.py``): the HTTP is the standard
library's ``http.client``, used through its public API only (``putrequest``/``putheader``/
``endheaders``/``getresponse``, ``set_tunnel`` for a proxy, ``connect`` overridden as
``HTTPSConnection`` itself does). urllib3, which the official client brings along, was measured
against this pool and costs more CPU per claim GET and status apply and more memory in the pod;
it reads answers with the same ``http.client`` underneath, so it would not save the parts below,
which are the reason this module exists:

* An overall deadline per request. A per-read timeout alone is reset by every byte, so a server
  (or a proxy in front of one) that trickles a byte a second held a prepare call for minutes.
  The sockets are :class:`socket.socket` and :class:`ssl.SSLSocket` subclasses (the latter
  through the documented ``SSLContext.sslsocket_class``) whose every ``recv_into`` and
  ``sendall`` waits at most until the request's deadline.
* Bounded answers: the head of an answer (interim ``1xx`` answers included, which ``http.client``
  skips without limit) may take at most ``MAX_HEAD`` bytes, a body ``max_body`` bytes, a watch
  line a limit of its own. An interim answer other than ``100 Continue`` (``http.client`` takes it
  for the final one) is refused: nobody here asks for one.
* Resending only what is safe: an idempotent request (a GET; a server-side apply of one body)
  that fails on a reused connection before any byte of the answer arrived (the server closed it
  while it sat idle) is sent once more on a fresh connection; a request the caller does not
  declare idempotent is never resent, the server may have acted on it.
* A watch (:meth:`Transport.stream`) reads line by line on a connection of its own, may be closed
  from another thread, and tells an end from a cut: a chunked answer that stops before its last
  chunk raises :class:`ConnectionClosedError` (``http.client``'s ``readline`` returns ``b""``).
* A proxy is a ``CONNECT`` tunnel (:mod:`driver.kube.proxy` decides which).

Connections are pooled last-in first-out (the warmest first), at most ``max_idle`` kept; one
that the server closed while idle is noticed at checkout. Failures are plain exceptions (the
``OSError`` family, :class:`ProtocolError`); :mod:`driver.kube.client` maps them to
:class:`~driver.errors.KubeError` in one place.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from driver.kube.proxy import Proxy

__all__ = [
    "MAX_HEAD",
    "ConnectionClosedError",
    "ProtocolError",
    "Response",
    "Stream",
    "Transport",
    "TransportSettings",
]

#: bytes an answer's head may take, interim answers included: far above an apiserver's heads
#: (``http.client`` alone allows ``_MAXHEADERS`` lines of ``_MAXLINE`` bytes, and interim answers
#: without end)
MAX_HEAD = 256 * 1024
#: bytes a body may take unless the transport says otherwise: far above a page of claims or a
#: node's slices, far below what hurts the pod
DEFAULT_MAX_BODY = 64 * 1024 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # never allowed in a header value
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")  # never allowed in a method, target or name
#: a socket timeout is only reset when it would change by this much (seconds)
_REARM = 0.1


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
        ctx.sslsocket_class = _PacedTlsSocket
        return ctx


@dataclass(frozen=True, slots=True)
class Response:
    """One complete answer; ``keep_alive`` says whether the connection may carry another request."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case
    keep_alive: bool = True


class _Paced:
    """What the driver's sockets add: every receive and send ends by the request's deadline.

    Mixed into :class:`socket.socket` (plain http) and :class:`ssl.SSLSocket` (https). Per request
    the pool sets ``deadline`` (monotonic) and ``read_timeout``; the socket counts the bytes of the
    answer (the resend rule needs to know whether any came), notices the server's EOF (a head cut
    off by it would otherwise read as whole) and charges the head's bytes to ``head_budget``.
    Between :meth:`hold` and :meth:`release` it collects what is sent and sends it at once:
    ``http.client`` writes a request's head and body apart, two TLS records for every status apply
    where one does.
    """

    deadline = float("inf")
    read_timeout = 0.0
    received = 0
    eof = False
    head_budget: int | None = None  # bytes the answer's head may still take; None: head done
    _armed = -1.0  # the socket's timeout as last set
    _held: list[bytes] | None = None  # sent since hold(), not yet written

    def start_answer(self, deadline: float, read_timeout: float) -> None:
        """Arm for a new request: its deadline and per-read timeout, a fresh head budget."""
        self.deadline, self.read_timeout = deadline, read_timeout
        self.received, self.eof, self.head_budget = 0, False, MAX_HEAD
        self._held = None

    def hold(self) -> None:
        """Collect what is sent from now on, until :meth:`release`."""
        self._held = []

    def release(self) -> None:
        """Send what was collected since :meth:`hold`, in one write."""
        held, self._held = self._held, None
        if held:
            self.sendall(b"".join(held))

    def arm(self) -> None:
        """Set the timeout of the next socket operation: the per-read one, cut at the deadline.

        ``settimeout`` is skipped while the value would change by less than ``_REARM`` seconds,
        which is what a fast answer sees (the deadline is then kept to within ``_REARM``).
        """
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no complete answer by the deadline ({self.received} bytes received)")
        timeout = min(self.read_timeout, left)
        if not -_REARM < timeout - self._armed < _REARM:
            self.settimeout(timeout)  # type: ignore[attr-defined]
            self._armed = timeout

    def recv_into(self, buffer: Any, *args: Any) -> int:
        self.arm()
        try:
            count: int = super().recv_into(buffer, *args)  # type: ignore[misc]
        except TimeoutError as exc:
            raise TimeoutError(self._timeout_message()) from exc
        self.received += count
        self.eof = self.eof or not count
        if self.head_budget is not None:
            self.head_budget -= count
            if self.head_budget < 0:
                raise ProtocolError(f"the answer's head (interim answers included) is over {MAX_HEAD} bytes")
        return count

    def sendall(self, data: Any, *args: Any) -> None:
        if self._held is not None:
            self._held.append(bytes(data))
            return
        self.arm()
        try:
            super().sendall(data, *args)  # type: ignore[misc]
        except TimeoutError as exc:
            raise TimeoutError(self._timeout_message()) from exc

    def _timeout_message(self) -> str:
        if time.monotonic() >= self.deadline - _REARM:
            return f"no complete answer by the deadline ({self.received} bytes received)"
        return f"no answer within the read timeout of {self.read_timeout:g} s"


class _PacedSocket(_Paced, socket.socket):
    """A plain TCP socket with the request's deadline (http servers: tests, benches)."""


class _PacedTlsSocket(_Paced, ssl.SSLSocket):
    """A TLS socket with the request's deadline (made by ``SSLContext.wrap_socket``)."""


class _HttpConnection(http.client.HTTPConnection):
    """``http.client``'s connection over a paced socket: TLS when the settings say https, through
    a ``CONNECT`` tunnel when they name a proxy. Its ``connect`` does what ``HTTPSConnection``'s
    does (the TCP connection and the tunnel by the base class, then the TLS handshake), with the
    name to check taken from the settings (``tls-server-name``) instead of the URL's host."""

    def __init__(
        self, settings: TransportSettings, tls: ssl.SSLContext | None, connect_timeout: float
    ) -> None:
        proxy = settings.proxy
        if proxy is None:
            super().__init__(settings.host, settings.port, timeout=connect_timeout)
        else:
            super().__init__(proxy.host, proxy.port, timeout=connect_timeout)
            self.set_tunnel(settings.host, settings.port, headers=proxy.tunnel_headers())
        self.numadra_settings = settings
        self.numadra_tls = tls
        self.paced: _PacedSocket | _PacedTlsSocket | None = None

    def connect(self) -> None:
        super().connect()
        settings, plain = self.numadra_settings, self.sock
        for level, option, value in settings.socket_options:
            plain.setsockopt(level, option, value)
        paced: _PacedSocket | _PacedTlsSocket
        if self.numadra_tls is not None:
            name = settings.server_hostname or settings.host
            wrapped = self.numadra_tls.wrap_socket(plain, server_hostname=name)
            assert isinstance(wrapped, _PacedTlsSocket)  # the context's sslsocket_class
            paced = wrapped
        else:
            paced = _PacedSocket(fileno=plain.detach())
        self.sock = self.paced = paced


class _Connection:
    """One pooled connection: ``http.client``'s, its paced socket, whether it served before."""

    __slots__ = ("http", "reused", "sock")

    def __init__(self, conn: _HttpConnection) -> None:
        self.http = conn
        assert conn.paced is not None
        self.sock = conn.paced
        self.reused = False

    def start(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        *,
        host: str,
        body: bytes,
        deadline: float,
        read_timeout: float,
    ) -> tuple[http.client.HTTPResponse, dict[str, str]]:
        """Send one request and read the head of its answer (status and fields) by ``deadline``."""
        sock = self.sock
        sock.start_answer(deadline, read_timeout)
        with _translated(sock):
            conn = self.http
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", host)
            for name, value in headers.items():
                conn.putheader(name, value)
            if body or method != "GET":
                conn.putheader("Content-Length", str(len(body)))
            sock.hold()
            conn.endheaders(body or None)
            sock.release()  # the head and the body in one write
            answer = conn.getresponse()
            sock.head_budget = None
            if sock.eof:  # http.client takes a head cut off by EOF for a whole one
                raise http.client.IncompleteRead(b"")
            if answer.status == 101:
                raise ProtocolError("the server switched protocols")
            if answer.status < 200:
                raise ProtocolError(f"an interim answer ({answer.status}) where the final one was due")
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

    def looks_idle(self) -> bool:
        """Nothing is waiting to be read: a kept connection the server closed reads as EOF."""
        sock = self.sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    def close(self) -> None:
        self.http.close()


def _cut(sock: _Paced, fields: Mapping[str, str]) -> bool:
    """The server closed the connection before the answer's framing said it was over.

    ``http.client`` hides this: a sized body read by amount comes back short, and ``readline``
    returns ``b""`` for a chunked answer without its last chunk. But a complete framed answer is
    read without asking the socket for one byte more, so an EOF seen while reading it means the
    answer was cut. (An answer framed by the connection's end has no other end: not a cut.)
    """
    framed = "content-length" in fields or "chunked" in fields.get("transfer-encoding", "").lower()
    return sock.eof and framed


@contextlib.contextmanager
def _translated(sock: _Paced) -> Iterator[None]:
    """``http.client``'s exceptions as this module's: what went wrong, in words that say so."""
    try:
        yield
    except http.client.RemoteDisconnected as exc:
        raise ConnectionClosedError("the server closed the connection without answering") from exc
    except http.client.IncompleteRead as exc:
        raise ConnectionClosedError(
            f"the server closed the connection {sock.received} bytes into the answer"
        ) from exc
    except http.client.HTTPException as exc:  # bad status line, a line or head too long...
        raise ProtocolError(f"{type(exc).__name__}: {exc}"[:200]) from exc


class Stream:
    """An answer read line by line as it comes (a watch), on a connection of its own.

    :meth:`close` may be called from any thread: it shuts the socket down, so a read blocked in
    another thread returns at once (that read then ends or raises; the caller knows it closed).
    """

    def __init__(self, conn: _Connection, answer: http.client.HTTPResponse, fields: dict[str, str]) -> None:
        self.status = answer.status
        self.headers: Mapping[str, str] = fields
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
        with _translated(self._conn.sock):
            line = answer.readline(limit + 1)
        if len(line) > limit:
            raise ProtocolError(f"a line of the answer is longer than {limit} bytes")
        if not line and not self._closed and _cut(self._conn.sock, self.headers):
            raise ConnectionClosedError(
                f"the server ended the answer before its end ({self._conn.sock.received} bytes received)"
            )
        return line

    def read(self, limit: int = DEFAULT_MAX_BODY) -> bytes:
        """The rest of the answer (an error's Status object), at most ``limit`` bytes."""
        with _translated(self._conn.sock):
            return self._answer.read(limit)

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
        if _CONTROL_OR_SPACE.search(method):
            raise ValueError(f"invalid method {method!r}")
        path = self._path(target, headers)
        limit = self.deadline if deadline is None else deadline
        ends = time.monotonic() + limit
        try:
            conn = self._checkout(ends)
            try:
                try:
                    response = self._exchange(conn, method, path, headers, body=body, ends=ends)
                except (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
                    conn.close()
                    if not idempotent or not conn.reused or conn.sock.received:
                        raise
                    self._drop_idle()  # the server closed one idle connection: likely the older ones
                    conn = self._connect(ends)
                    response = self._exchange(conn, method, path, headers, body=body, ends=ends)
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
        conn = self._connect(ends)
        try:
            answer, fields = conn.start(
                "GET",
                path,
                headers,
                host=self.settings.host_header,
                body=b"",
                deadline=ends,
                read_timeout=deadline,
            )
        except BaseException:
            conn.close()
            raise
        return Stream(conn, answer, fields)

    def close(self) -> None:
        """Close the kept connections; ones in use are closed when they come back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- internals -------------------------------------------------------------------------------
    def _exchange(
        self,
        conn: _Connection,
        method: str,
        path: str,
        headers: Mapping[str, str],
        *,
        body: bytes,
        ends: float,
    ) -> Response:
        """One request and its whole answer, by ``ends``."""
        answer, fields = conn.start(
            method,
            path,
            headers,
            host=self.settings.host_header,
            body=body,
            deadline=ends,
            read_timeout=self.timeout,
        )
        with _translated(conn.sock):
            data = answer.read(self.max_body + 1)  # a chunked body cut short raises here
            if len(data) > self.max_body:
                raise ProtocolError(f"the answer's body is over {self.max_body} bytes")
            if _cut(conn.sock, fields):  # a sized one cut short comes back short
                raise http.client.IncompleteRead(data)
        return Response(answer.status, data, fields, not answer.will_close)

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

    def _connect(self, deadline: float) -> _Connection:
        timeout = min(self.connect_timeout, deadline - time.monotonic())
        if timeout <= 0:
            raise TimeoutError("no time left to connect")
        conn = _HttpConnection(self.settings, self._tls, timeout)
        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise TimeoutError(f"connect timed out after {timeout:g} s") from exc
        except BaseException:
            conn.close()
            raise
        return _Connection(conn)
