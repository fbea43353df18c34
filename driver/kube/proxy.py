"""Which HTTP proxy carries the apiserver connection, decided as client-go decides it.

Why here: a node behind an egress proxy reaches the apiserver through it, and the driver must
honour the same settings a Go DRA driver would (client-go takes them from the kubeconfig's
``proxy-url``, or from the environment through Go's ``net/http.ProxyFromEnvironment``). The
transport then tunnels through the proxy with ``CONNECT`` (:mod:`driver.kube.transport`).

The environment, as Go's ``golang.org/x/net/http/httpproxy`` reads it:

* ``HTTPS_PROXY`` (or ``https_proxy``) for an https server, ``HTTP_PROXY`` (``http_proxy``) for
  an http one; the upper-case name wins; a value without a scheme means ``http://``;
* ``NO_PROXY`` (``no_proxy``): comma-separated; ``*`` matches everything; an IP address or CIDR
  range matches addresses; ``name`` matches that name and its subdomains, ``.name`` (or
  ``*.name``) its subdomains only; an entry may carry ``:port``;
* ``localhost`` and loopback addresses never go through an environment proxy.

Only ``http://`` proxies are supported (``CONNECT`` over plain TCP, with ``user:password`` sent as
``Proxy-Authorization: Basic``); an ``https://`` or ``socks5://`` proxy is refused with a
:class:`~driver.errors.ConfigError` that names where the setting came from, never ignored.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from driver.errors import ConfigError

__all__ = ["Proxy", "bypasses_proxy", "environment_proxy", "parse_proxy_url"]


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy to tunnel through: where it listens, and the ``Proxy-Authorization`` to send."""

    host: str
    port: int
    authorization: str = ""

    def tunnel_headers(self) -> dict[str, str]:
        """The headers of the ``CONNECT`` request."""
        return {"Proxy-Authorization": self.authorization} if self.authorization else {}


def parse_proxy_url(url: str, source: str) -> Proxy:
    """The :class:`Proxy` of ``url`` (``source`` names the setting, for the error message)."""
    raw = url.strip()
    if "://" not in raw:
        raw = f"http://{raw}"
    try:
        parts = urlsplit(raw)
        port = parts.port or 80
    except ValueError as exc:
        raise ConfigError(f"{source}: proxy {url!r} is not a URL: {exc}") from exc
    if parts.scheme != "http":
        raise ConfigError(
            f"{source}: proxy scheme {parts.scheme!r} is not supported (only http:// proxies, "
            "tunnelled with CONNECT)"
        )
    if not parts.hostname:
        raise ConfigError(f"{source}: proxy {url!r} names no host")
    authorization = ""
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = f"Basic {base64.b64encode(pair).decode()}"
    return Proxy(parts.hostname, port, authorization)


def bypasses_proxy(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``host:port`` is excluded from proxying by a ``NO_PROXY`` list (module docstring)."""
    host = host.strip("[]").lower().rstrip(".")
    address = _address(host)
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            try:
                network = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                continue
            if address is not None and address in network:
                return True
            continue
        name, entry_port = _split_port(entry)
        if entry_port and entry_port != str(port):
            continue
        entry_address = _address(name)
        if entry_address is not None:
            if address == entry_address:
                return True
            continue
        name = name.removeprefix("*").rstrip(".")
        if name.startswith("."):
            if host.endswith(name):
                return True
        elif host == name or host.endswith(f".{name}"):
            return True
    return False


def environment_proxy(scheme: str, host: str, port: int, environ: Mapping[str, str]) -> Proxy | None:
    """The proxy the environment sets for ``scheme://host:port``, or None (module docstring)."""
    names = ("HTTPS_PROXY", "https_proxy") if scheme == "https" else ("HTTP_PROXY", "http_proxy")
    name = next((n for n in names if environ.get(n, "").strip()), "")
    if not name:
        return None
    bare = host.strip("[]").lower()
    address = _address(bare)
    if bare == "localhost" or (address is not None and address.is_loopback):
        return None
    no_proxy = environ.get("NO_PROXY") or environ.get("no_proxy") or ""
    if bypasses_proxy(host, port, no_proxy):
        return None
    return parse_proxy_url(environ[name], f"environment variable {name}")


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _split_port(entry: str) -> tuple[str, str]:
    """``host:port`` or ``[v6]:port`` -> (host, port); a bare IPv6 address has no port."""
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        return name, rest.removeprefix(":")
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name, port
    return entry, ""
