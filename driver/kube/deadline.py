"""One deadline per apiserver request, and the only sockets that may wait on the network.

Why: a timeout per socket operation is reset by every byte, so a server, or a proxy in front of
it, that sends a byte a second (or header line after header line) holds a request for as long as
it likes. A request therefore gets one :class:`Deadline` when it starts, and every phase of it
waits inside that deadline: the TCP connect, a proxy's ``CONNECT`` reply, the TLS handshake,
sending, the answer's head and its body. Each socket wait is at most the phase's own timeout
(connect or read), cut at what is left of the deadline.

The primitive is the socket itself, not a rule each caller must remember: :class:`PacedSocket`
(plain TCP) and :class:`PacedTlsSocket` (made by ``SSLContext.wrap_socket`` through the documented
``sslsocket_class``) arm their timeout before every method in :data:`BLOCKING_CALLS`, and one
that nobody paced (:meth:`PacedSocket.pace`) refuses to wait at all. :func:`open_tcp` is how a
connection starts, :func:`start_tls` how its handshake runs. The transport makes no other
socket, and ``tests/unit/kube/test_deadline.py`` scans ``driver/kube`` so that no later phase
can: sockets are made, timeouts set and handshakes started only here.

Not cut by the deadline: the name lookup of ``getaddrinfo``, which has no timeout of its own (the
resolver's, from ``resolv.conf``, bounds it).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "BLOCKING_CALLS",
    "Deadline",
    "PacedSocket",
    "PacedTlsSocket",
    "WaitTimeoutError",
    "open_tcp",
    "start_tls",
]

#: every method of a socket (plain or TLS) that can wait on the network; each is paced
BLOCKING_CALLS = (
    "accept",
    "connect",
    "connect_ex",
    "do_handshake",
    "read",
    "recv",
    "recv_into",
    "recvfrom",
    "recvfrom_into",
    "recvmsg",
    "recvmsg_into",
    "send",
    "sendall",
    "sendfile",
    "sendmsg",
    "sendmsg_afalg",
    "sendto",
    "unwrap",
    "write",
)
#: a socket timeout is only reset when it would change by this much (seconds)
REARM = 0.1


class Deadline:
    """When one request must be over (monotonic clock), and how long it was given (for messages)."""

    __slots__ = ("ends", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds

    @classmethod
    def spent(cls) -> Deadline:
        """A deadline already over: what a socket nobody paced has."""
        deadline = cls(0.0)
        deadline.ends = float("-inf")
        return deadline

    def left(self) -> float:
        """Seconds left (negative once over)."""
        return self.ends - time.monotonic()

    def over(self) -> bool:
        """True once the deadline is over, or too close to it for a socket wait to mean anything
        else (the pacing keeps the deadline to within :data:`REARM`)."""
        return self.left() <= REARM


class WaitTimeoutError(TimeoutError):
    """A socket wait of a request ended: its message says which phase and which bound (the
    phase's own timeout, or the request's deadline)."""


class _Paced:
    """What the driver's sockets add: every wait ends by the request's deadline.

    Mixed into :class:`socket.socket` and :class:`ssl.SSLSocket`. :meth:`pace` starts a phase with
    its deadline and per-operation timeout; :meth:`recv_into` counts the bytes of the phase (the
    head bound and the resend rule need them) and notices the peer's EOF. Every other method in
    :data:`BLOCKING_CALLS` is wrapped below to arm first.
    """

    deadline = Deadline.spent()
    per_op = 0.0
    per_op_name = "timeout"
    phase = "unpaced socket"
    received = 0
    eof = False
    _armed = -1.0  # the socket's timeout as last set

    def pace(self, deadline: Deadline, per_op: float, phase: str, per_op_name: str) -> None:
        """Start a phase (``"answer"``, ``"TLS handshake"``...): its waits end by ``deadline``,
        each after ``per_op`` seconds at most (``per_op_name`` says which timeout that is)."""
        self.deadline, self.per_op, self.phase, self.per_op_name = deadline, per_op, phase, per_op_name
        self.received, self.eof = 0, False

    def arm(self) -> None:
        """Set the timeout of the next socket wait: the per-operation one, cut at the deadline.

        ``settimeout`` is skipped while the value would change by less than :data:`REARM` seconds,
        which is what a fast answer sees (the deadline is then kept to within :data:`REARM`).
        """
        left = self.deadline.left()
        if left <= 0:
            raise WaitTimeoutError(self._over())
        timeout = min(self.per_op, left)
        if not -REARM < timeout - self._armed < REARM:
            self.settimeout(timeout)  # type: ignore[attr-defined]
            self._armed = timeout

    def recv_into(self, *args: Any) -> int:
        self.arm()
        try:
            count: int = super().recv_into(*args)  # type: ignore[misc]
        except WaitTimeoutError:
            raise
        except TimeoutError as exc:
            raise WaitTimeoutError(self._timeout_message()) from exc
        self.received += count
        self.eof = self.eof or not count
        return count

    def _over(self) -> str:
        return f"{self.phase}: not done by the deadline ({self.received} bytes received)"

    def _timeout_message(self) -> str:
        if self.deadline.over():
            return self._over()
        return f"{self.phase}: nothing within the {self.per_op_name} of {self.per_op:g} s"


def _paced(name: str) -> Callable[..., Any]:
    """``name`` of the next class in the socket's MRO, armed first (see :class:`_Paced`)."""

    def call(self: _Paced, *args: Any, **kwargs: Any) -> Any:
        self.arm()
        try:
            return getattr(super(_Paced, self), name)(*args, **kwargs)
        except WaitTimeoutError:
            raise
        except TimeoutError as exc:
            raise WaitTimeoutError(self._timeout_message()) from exc

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``{name}``, waiting at most until the phase's deadline."
    return call


for _name in BLOCKING_CALLS:
    if _name not in vars(_Paced):
        setattr(_Paced, _name, _paced(_name))


class PacedSocket(_Paced, socket.socket):
    """A plain TCP socket whose every wait ends by the request's deadline (public so that the
    transport's test can prove each blocking method is paced)."""


class PacedTlsSocket(_Paced, ssl.SSLSocket):
    """A TLS socket whose every wait ends by the request's deadline: set as a context's
    ``sslsocket_class``, and wrap with ``do_handshake_on_connect=False`` so that the handshake
    runs paced, as a phase of its own."""


def open_tcp(host: str, port: int, deadline: Deadline, connect_timeout: float) -> PacedSocket:
    """A TCP connection to ``host:port`` (each address in turn), by ``deadline``.

    Each attempt waits at most ``connect_timeout``; raises the last attempt's ``OSError``
    (``TimeoutError`` once the deadline is over). Sets ``TCP_NODELAY``: a request leaves in one
    write, and waiting for an ACK before the next would only add latency.
    """
    error: OSError = OSError(f"{host}:{port}: the name resolves to no address")
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = PacedSocket(family, kind, proto)
        try:
            sock.pace(deadline, connect_timeout, "connect", "connect timeout")
            sock.connect(address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error


def start_tls(
    sock: PacedSocket, tls: ssl.SSLContext, server_hostname: str, deadline: Deadline, connect_timeout: float
) -> PacedTlsSocket:
    """The TLS session over ``sock`` (``tls`` must make :class:`PacedTlsSocket`), its handshake
    done by ``deadline``, each wait at most ``connect_timeout``. ``sock`` is the TLS socket's from
    here; on failure both are closed."""
    try:
        wrapped = tls.wrap_socket(sock, server_hostname=server_hostname, do_handshake_on_connect=False)
    except BaseException:
        sock.close()
        raise
    try:
        if not isinstance(wrapped, PacedTlsSocket):
            raise TypeError("the TLS context's sslsocket_class is not PacedTlsSocket")
        wrapped.pace(deadline, connect_timeout, "TLS handshake", "connect timeout")
        wrapped.do_handshake()
    except BaseException:
        wrapped.close()
        raise
    return wrapped
