"""The pod's own apiserver connection (in-cluster), read without importing the official client.

Why: the DaemonSet, the one way numadra runs on a node, needs none of the kubeconfig machinery of
the official ``kubernetes`` package, whose import alone is most of the driver's steady memory
(figures: bench/README.md): a service address from the environment, a CA file, a token file, and
the environment's proxy settings. The kubeconfig path (development, tests, the benches) loads
through the official client instead (:mod:`driver.kube.kubeconfig`).

The facts, as client-go's ``rest.InClusterConfig`` and the official client's
``load_incluster_config`` read them:

* server ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`` (an IPv6 host bracketed);
  both variables must be set and non-empty;
* CA ``/var/run/secrets/kubernetes.io/serviceaccount/ca.crt``, which must exist and be non-empty;
* token ``/var/run/secrets/kubernetes.io/serviceaccount/token``, sent as ``Authorization: Bearer``
  and read again once a minute: projected tokens are rotated by the kubelet well before they
  expire, and an old one stops working when it does. A token that
  cannot be read again keeps the last good one (client-go does the same), so a passing hiccup of
  the file does not fail calls while the old token is still valid. The token is read on demand,
  by the request that needs it: no loop, nothing to retry;
* ``HTTPS_PROXY``/``NO_PROXY`` as Go's ``net/http`` reads them (:mod:`driver.kube.proxy`).

A token holding a line break or another control character would become a second header line
(the token file is the kubelet's, but nothing is trusted for where it seems to come from): it is
refused with a clear error, never sent. Only the edges are trimmed (a trailing newline).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Mapping

from driver.errors import ConfigError, UntrustedValueError
from driver.kube.proxy import environment_proxy
from driver.kube.transport import TransportSettings
from driver.untrusted.files import read_file
from driver.untrusted.values import ascii_int

__all__ = ["CA_FILE", "REFRESH_S", "TOKEN_FILE", "InCluster"]

TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"  # noqa: S105 -- a path
CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
#: how long a token read from the file is used before the file is read again (client-go's period)
REFRESH_S = 60.0
#: no control character and no space inside a token (RFC 6750 b64token is narrower still)
_BAD_TOKEN = re.compile(r"[\x00-\x20\x7f]")
#: a service account token is a JWT of a few KiB; more is not a token
_MAX_TOKEN = 64 * 1024
#: a CA bundle of many certificates is still far below this
_MAX_CA = 4 << 20


class InCluster:
    """The in-cluster settings and the ``Authorization`` header of right now (thread-safe).

    ``environ`` (default ``os.environ``) gives the service address and the proxy settings.
    """

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        token_file: str = TOKEN_FILE,
        ca_file: str = CA_FILE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        env = os.environ if environ is None else environ
        host = env.get("KUBERNETES_SERVICE_HOST", "")
        port = env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise ConfigError(
                "not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set "
                "(pass --kubeconfig outside a cluster)"
            )
        try:
            port_number = ascii_int(port, what="KUBERNETES_SERVICE_PORT", lo=1, hi=65535)
        except UntrustedValueError as exc:
            raise ConfigError(f"KUBERNETES_SERVICE_PORT {port!r} is not a port number") from exc
        if _BAD_TOKEN.search(host) or "/" in host:
            raise ConfigError(f"KUBERNETES_SERVICE_HOST {host!r} is not a host name or address")
        try:
            # the projected volume links the file to ..data/<name>: links there are the kubelet's
            if not read_file(ca_file, max_bytes=_MAX_CA, follow_symlinks=True):
                raise ConfigError(f"the service account CA file {ca_file} is empty")
        except OSError as exc:
            raise ConfigError(f"cannot read the service account CA file {ca_file}: {exc.strerror}") from exc
        bare = host.strip("[]")
        self.settings = TransportSettings(
            scheme="https",
            host=bare,
            port=port_number,
            ca_file=ca_file,
            proxy=environment_proxy("https", bare, port_number, env),
        )
        self.token_file = token_file
        self._now = clock
        self._lock = threading.Lock()
        self._header = self._read_token()  # fails the start when there is no usable token
        self._read_at = clock()

    @property
    def server(self) -> str:
        """The server URL, as the official client would have it (for messages)."""
        host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
        return f"https://{host}:{self.settings.port}"

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header of right now."""
        return {"Authorization": self.authorization()}

    def authorization(self) -> str:
        """``Bearer <token>``, from a file read at most :data:`REFRESH_S` seconds ago if it could be."""
        if self._now() - self._read_at < REFRESH_S:
            return self._header
        with self._lock:
            if self._now() - self._read_at >= REFRESH_S:
                # keep the last good token until the file can be read again (as client-go)
                with contextlib.suppress(ConfigError):
                    self._header = self._read_token()
                self._read_at = self._now()
            return self._header

    def _read_token(self) -> str:
        try:
            raw = read_file(self.token_file, max_bytes=_MAX_TOKEN + 1, follow_symlinks=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot read the service account token {self.token_file}: {exc.strerror}"
            ) from exc
        token = raw.decode("ascii", errors="replace").strip()  # a non-ASCII byte becomes U+FFFD
        if not token:
            raise ConfigError(f"the service account token {self.token_file} is empty")
        if len(raw) > _MAX_TOKEN or _BAD_TOKEN.search(token) or not token.isascii():
            raise ConfigError(
                f"the service account token {self.token_file} is not a token (too long, or a space, "
                "line break or control character inside): refusing to send it as a header"
            )
        return f"Bearer {token}"
