"""A FAKE kube-apiserver over real TLS, for the driver's transport: only claim GET and LIST, with knobs.

FakeApiServer speaks plain HTTP; the TLS side (CA checks, client certificates, SNI) and the
server-side behaviours the transport must survive (idle connections closed, a request dropped on a
kept connection, slow or failing answers, chunked bodies) are played here. Certificates come from
the ``openssl`` CLI (:func:`make_pki`).
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

__all__ = ["FakeTlsApiServer", "Pki", "SeenRequest", "make_pki", "write_kubeconfig"]

_CLAIMS = "/apis/resource.k8s.io/v1/namespaces/"


@dataclass(frozen=True)
class Pki:
    """Paths of a throwaway CA, a serving certificate (127.0.0.1, localhost, kubernetes.default.svc)
    and a client one."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path) -> Pki:
    """Make the certificates with EC P-256 keys (fast), valid for a day."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.crt", "-days", "1",
                 "-subj", f"/CN=numadra-test-{ca}", cwd=directory)  # fmt: skip
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
    )
    (directory / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject in (("server", "/CN=kube-apiserver"), ("client", "/CN=numadra-test-client/O=test")):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext", cwd=directory)  # fmt: skip
    return Pki(
        ca=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.crt",
    )


def write_kubeconfig(path: Path, server: str, *, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    """A one-context kubeconfig for ``server``; ``cluster``/``user`` hold the rest of each entry."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "t", "user": user}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }
    path.write_text(json.dumps(config))
    return str(path)


@dataclass(frozen=True)
class SeenRequest:
    """One request as the fake saw it: path, Authorization header, client certificate CN (and for
    a PATCH: method, Content-Type and body)."""

    path: str
    authorization: str
    client_cn: str
    method: str = "GET"
    content_type: str = ""
    body: bytes = b""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # 16 clients connecting at once must not wait for SYN retransmits
    fake: FakeTlsApiServer

    def get_request(self) -> tuple[Any, Any]:
        """Accept and wrap; the handshake runs in the connection's own thread (see _Handler.setup)."""
        sock, addr = super().get_request()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.fake.lock:
            self.fake.connections += 1
        return self.fake.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up and refused handshakes are part of the tests."""

    def shutdown_request(self, request: Any) -> None:
        with self.fake.lock:
            self.fake.closed += 1
        super().shutdown_request(request)


class FakeTlsApiServer:
    """HTTPS on 127.0.0.1 serving claims ``<ns>/<name>``; special names answer 403, 404, 500 or late.

    A PATCH of ``.../resourceclaims/<name>/status`` (a status apply) answers the claim with the
    body's ``status``; the same special names apply.

    Knobs: ``token`` (401 without ``Bearer <token>``), ``require_client_cert``, ``idle_timeout``
    (close kept connections idle that long), ``drop_after`` (on each connection, read the request
    after that many answers and close without answering: a keep-alive race), ``slow_seconds``
    (how long ``slow`` is held at most; ``release_slow`` ends the hold early, and
    ``slow_answered`` is set once a held answer went out).
    """

    def __init__(self, pki: Pki, *, require_client_cert: bool = False) -> None:
        self.pki = pki
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
        self.context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
        self.context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
        self.token = ""
        self.idle_timeout = 30.0
        self.drop_after = 0
        self.slow_seconds = 1.0
        self.release_slow = threading.Event()
        self.slow_answered = threading.Event()
        self.list_size = 300
        self.lock = threading.Lock()
        self.connections = 0  # accepted so far
        self.closed = 0  # ended by either side so far
        self.seen: list[SeenRequest] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The claim object served for ``namespace/name``."""
        meta = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"}
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": {}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def setup(self) -> None:
        self.answered = 0
        self.request.settimeout(5.0)
        self.request.do_handshake()
        super().setup()
        self.connection.settimeout(self.server.fake.idle_timeout)  # how long a kept one may sit idle

    def do_GET(self) -> None:
        fake = self.server.fake
        peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        rdns = cast("tuple[tuple[tuple[str, str], ...], ...]", (peer or {}).get("subject", ()))
        subject = dict(pair for rdn in rdns for pair in rdn)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        seen = SeenRequest(
            self.path,
            self.headers.get("Authorization", ""),
            subject.get("commonName", ""),
            self.command,
            self.headers.get("Content-Type", ""),
            body,
        )
        with fake.lock:
            fake.seen.append(seen)
        if fake.drop_after and self.answered >= fake.drop_after:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.answered += 1
        if fake.token and self.headers.get("Authorization") != f"Bearer {fake.token}":
            self._status(401, "Unauthorized")
            return
        parts = self.path.removeprefix(_CLAIMS).split("?")[0].split("/")
        if self.command == "PATCH":
            if len(parts) == 4 and parts[1] == "resourceclaims" and parts[3] == "status":
                self._get(parts[0], parts[2], json.loads(body).get("status"))
            else:
                self._status(405, f"PATCH is not served on {self.path}")
        elif len(parts) == 2 and parts[1] == "resourceclaims":
            self._list(parts[0])
        elif len(parts) == 3 and parts[1] == "resourceclaims":
            self._get(parts[0], parts[2])
        else:
            self._status(404, "the server could not find the requested resource")

    do_PATCH = do_GET  # noqa: N815

    def _get(self, namespace: str, name: str, status: Any = None) -> None:
        fake = self.server.fake
        if name == "forbidden":
            self._status(403, f'resourceclaims.resource.k8s.io "{name}" is forbidden: User cannot get')
        elif name == "missing":
            details = {"name": name, "group": "resource.k8s.io", "kind": "resourceclaims"}
            self._status(404, f'resourceclaims.resource.k8s.io "{name}" not found', "NotFound", details)
        elif name == "broken":
            self._status(500, "etcdserver: request timed out")
        else:
            if name == "slow":
                fake.release_slow.wait(fake.slow_seconds)
            claim = fake.claim(namespace, name)
            if status is not None:
                claim["status"] = status
            self._send(200, json.dumps(claim).encode())
            if name == "slow":
                fake.slow_answered.set()

    def _list(self, namespace: str) -> None:
        """Always chunked, in uneven pieces, as Go's server answers a big LIST."""
        fake = self.server.fake
        items = [fake.claim(namespace, f"claim-{i:04d}") for i in range(fake.list_size)]
        body = json.dumps({"kind": "ResourceClaimList", "metadata": {"resourceVersion": "7"}, "items": items})
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        offset, size = 0, 1
        while offset < len(data):
            piece = data[offset : offset + size]
            self.wfile.write(b"%X\r\n%s\r\n" % (len(piece), piece))
            offset, size = offset + len(piece), size * 3 + 7
        self.wfile.write(b"0\r\n\r\n")

    def _status(
        self, code: int, message: str, reason: str = "", details: dict[str, str] | None = None
    ) -> None:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "code": code,
        }
        if reason:
            status["reason"] = reason
        if details is not None:
            status["details"] = details
        self._send(code, json.dumps(status).encode())

    def _send(self, code: int, data: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
