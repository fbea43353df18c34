"""No wait of an apiserver request can outlast its deadline: the class, scanned and exercised.

The primitive (driver/kube/deadline.py) is a socket that arms its timeout, cut at the request's
deadline, before every method that can wait. It holds only if every socket of ``driver/kube`` is
one of those, and only they set timeouts. So:

* a scan (AST) of ``driver/kube``: sockets are made, timeouts set, handshakes started only in the
  deadline module; a TLS wrap leaves the handshake to a paced call; no other HTTP client is used;
  every function that starts a phase takes the :class:`Deadline`. Planted modules prove the scan
  finds each of them;
* every method of ``socket.socket`` and ``ssl.SSLSocket`` is classified: one that can wait is
  paced (a socket past its deadline refuses it before touching the network), a new one a later
  Python adds fails here until it is.
"""

from __future__ import annotations

import ast
import socket
import ssl
from pathlib import Path

import pytest

from driver.kube.deadline import BLOCKING_CALLS, Deadline, PacedSocket, PacedTlsSocket

KUBE = Path(__file__).resolve().parents[3] / "driver" / "kube"
DEADLINE_MODULE = "deadline.py"

#: methods that only make sockets, or set how they wait: the deadline module's alone
_OWN = frozenset({"settimeout", "setblocking", "do_handshake"})
#: calls that make a socket that would not be paced
_MAKERS = frozenset({"socket", "create_connection", "socketpair", "fromfd", "PacedSocket"})
#: modules that would open connections of their own, outside the deadline
_CLIENTS = ("http.client", "urllib.request", "urllib3", "requests", "httpx", "asyncio", "aiohttp")
#: methods of a socket that never wait on the network
_NON_BLOCKING = frozenset(
    {
        "bind",
        "cipher",
        "close",
        "compression",
        "detach",
        "dup",
        "fileno",
        "get_channel_binding",
        "get_inheritable",
        "getblocking",
        "getpeercert",
        "getpeername",
        "getsockname",
        "getsockopt",
        "gettimeout",
        "listen",
        "makefile",  # its reads call recv_into: paced
        "pending",
        "selected_alpn_protocol",
        "selected_npn_protocol",
        "set_inheritable",
        "setblocking",
        "setsockopt",
        "settimeout",
        "shared_ciphers",
        "shutdown",
        "verify_client_post_handshake",
        "version",
    }
)


def _findings(path: Path) -> list[str]:
    """What in one module would let a wait escape the deadline (see the module docstring)."""
    tree = ast.parse(path.read_text(), str(path))
    own = path.name == DEADLINE_MODULE
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found += [f"{where}: imports {n}" for n in names if n.startswith(_CLIENTS)]
        if isinstance(node, ast.FunctionDef):
            found += _phase_without_deadline(node, where)
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if not own and (name in _OWN or name in _MAKERS):
            found.append(f"{where}: {name}() outside the deadline module")
        unpaced = not any(
            k.arg == "do_handshake_on_connect" and ast.unparse(k.value) == "False" for k in node.keywords
        )
        if name == "wrap_socket" and unpaced:
            found.append(f"{where}: wrap_socket() that shakes hands unpaced")
    return found


def _phase_without_deadline(func: ast.FunctionDef, where: str) -> list[str]:
    """A function that starts a phase (``pace``, ``open_tcp``, ``start_tls``, ``start``) takes the
    request's Deadline, or is where the request begins and makes it."""
    calls = {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(func)
        if isinstance(node, ast.Call)
    }
    args = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
    takes = any(a.annotation is not None and "Deadline" in ast.unparse(a.annotation) for a in args)
    if calls & {"pace", "open_tcp", "start_tls", "start"} and not takes and "Deadline" not in calls:
        return [f"{where}: {func.name}() starts a phase without a Deadline"]
    return []


def _scan(root: Path) -> list[str]:
    return [finding for path in sorted(root.glob("*.py")) for finding in _findings(path)]


def test_every_wait_in_driver_kube_goes_through_the_deadline() -> None:
    assert _scan(KUBE) == []


@pytest.mark.parametrize(
    ("planted", "finding"),
    [
        pytest.param("import socket\nsocket.create_connection(a)\n", "create_connection()", id="maker"),
        pytest.param("def f(s):\n    s.settimeout(5)\n", "settimeout()", id="settimeout"),
        pytest.param("def f(s):\n    s.do_handshake()\n", "do_handshake()", id="handshake"),
        pytest.param("def f(c, s):\n    c.wrap_socket(s)\n", "shakes hands unpaced", id="wrap"),
        pytest.param("import http.client\n", "imports http.client", id="client"),
        pytest.param("def f(s, t):\n    s.pace(t, 1.0, 'x', 'y')\n", "without a Deadline", id="phase"),
    ],
)
def test_the_scan_finds_a_planted_escape(tmp_path: Path, planted: str, finding: str) -> None:
    (tmp_path / "planted.py").write_text(planted)
    found = _scan(tmp_path)
    assert len(found) == 1 and finding in found[0], found


def test_every_socket_method_is_classified() -> None:
    """A method a later Python adds must be put in one class or the other before this passes."""
    methods = {
        name
        for cls in (socket.socket, ssl.SSLSocket)
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }
    assert methods - _NON_BLOCKING - set(BLOCKING_CALLS) == set()
    assert not set(BLOCKING_CALLS) & _NON_BLOCKING


def _tls_pair() -> tuple[PacedTlsSocket, socket.socket]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.sslsocket_class = PacedTlsSocket
    mine, peer = socket.socketpair()
    wrapped = ctx.wrap_socket(mine, server_hostname="x", do_handshake_on_connect=False)
    assert isinstance(wrapped, PacedTlsSocket)
    return wrapped, peer


@pytest.mark.parametrize("paced", [False, True], ids=["never-paced", "deadline-over"])
@pytest.mark.parametrize("kind", ["tcp", "tls"])
def test_every_blocking_method_refuses_to_wait_past_the_deadline(kind: str, paced: bool) -> None:
    """Called with no arguments at all, each method raises the deadline's TimeoutError: the arm
    comes before the arguments are even looked at, let alone the network."""
    if kind == "tcp":
        sock: PacedSocket | PacedTlsSocket = PacedSocket(socket.AF_INET, socket.SOCK_STREAM)
        peer: socket.socket | None = None
        base: type = socket.socket
    else:
        sock, peer = _tls_pair()
        base = ssl.SSLSocket
    spent = Deadline(0.0)
    try:
        if paced:
            sock.pace(spent, 5.0, "answer", "read timeout")
        names = [name for name in BLOCKING_CALLS if hasattr(base, name)]
        assert len(names) >= 14 if kind == "tcp" else len(names) == len(BLOCKING_CALLS)
        for name in names:
            with pytest.raises(TimeoutError, match="not done by the deadline"):
                getattr(sock, name)()
    finally:
        sock.close()
        if peer is not None:
            peer.close()


def test_a_paced_wait_ends_at_the_deadline_not_the_per_operation_timeout() -> None:
    """A real socket with a silent peer: the per-read timeout (30 s) is cut to the deadline."""
    mine, peer = socket.socketpair()
    sock = PacedSocket(fileno=mine.detach())
    try:
        sock.pace(Deadline(0.3), 30.0, "answer", "read timeout")
        with pytest.raises(TimeoutError, match=r"answer: not done by the deadline \(0 bytes received\)"):
            sock.recv_into(bytearray(10))
        assert sock.deadline.over()
    finally:
        sock.close()
        peer.close()
