"""The HTTP endpoint of a driver process: ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process can serve HTTP at all (the liveness probe: a wedged
process stops answering and gets restarted). ``/readyz`` answers 200 only when every readiness
check is set, e.g. ``{"registered": Event, "slices-published": Event}``; until then 503 with the
names of the checks still missing. The readiness probe is what makes a rolling update with
``maxUnavailable: 0`` wait until the new pod is registered with the kubelet and has published.

Built on the standard library's threading HTTP server in a daemon thread: no event loop to share
with the gRPC server, and ``stop()`` returns once the socket is closed.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from driver.errors import ConfigError
from driver.log import get_logger
from driver.observability.address import parse_address
from driver.observability.metrics import Metrics

__all__ = ["MetricsServer", "parse_address"]

_log = get_logger("metrics")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    metrics: Metrics
    ready_checks: Mapping[str, threading.Event]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    _routes: ClassVar[tuple[str, ...]] = ("/metrics", "/healthz", "/readyz")

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(HTTPStatus.OK, generate_latest(self.server.metrics.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._reply(HTTPStatus.OK, b"ok\n")
        elif path == "/readyz":
            missing = [name for name, event in sorted(self.server.ready_checks.items()) if not event.is_set()]
            if missing:
                body = "".join(f"not ready: {name}\n" for name in missing).encode()
                self._reply(HTTPStatus.SERVICE_UNAVAILABLE, body)
            else:
                self._reply(HTTPStatus.OK, b"ok\n")
        else:
            self._reply(HTTPStatus.NOT_FOUND, f"try {', '.join(self._routes)}\n".encode())

    def _reply(
        self, status: HTTPStatus, body: bytes, content_type: str = "text/plain; charset=utf-8"
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # Probes hit this every few seconds: keep them out of the default log level.
        _log.debug("http request", client=self.client_address[0], line=format % args)


class MetricsServer:
    """Serves a :class:`Metrics` registry plus health endpoints on one address.

    ``ready_checks`` maps a name to a :class:`threading.Event` that the owner sets when that
    condition holds (and may clear again: readiness is evaluated per request).
    """

    def __init__(
        self,
        address: str,
        ready_checks: Mapping[str, threading.Event] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._host, self._port = parse_address(address)
        self.metrics = metrics if metrics is not None else Metrics()
        self.ready_checks: Mapping[str, threading.Event] = dict(ready_checks or {})
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); the real port once started with port 0."""
        if self._server is None:
            return self._host, self._port
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """Base URL to reach the server from this host (for tests and logs)."""
        host, port = self.address
        if host in ("0.0.0.0", "::"):  # noqa: S104 -- comparing, not binding
            host = "127.0.0.1" if host == "0.0.0.0" else "::1"  # noqa: S104
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> None:
        """Bind and serve in a daemon thread; raises ConfigError when the address cannot be bound."""
        if self._server is not None:
            return
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        server_cls = type("_BoundServer", (_Server,), {"address_family": family})
        try:
            server = server_cls((self._host, self._port), _Handler)
        except OSError as exc:
            raise ConfigError(f"metrics address {self._host}:{self._port} cannot be bound: {exc}") from exc
        server.metrics = self.metrics
        server.ready_checks = self.ready_checks
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="metrics-http", daemon=True
        )
        self._thread.start()
        _log.info("metrics server listening", url=self.url)

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice or before start."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
