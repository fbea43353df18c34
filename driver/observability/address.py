"""``--metrics-address`` parsing, apart from the server so that the CLI checks it without prometheus."""

from __future__ import annotations

from driver.errors import ConfigError, UntrustedValueError
from driver.untrusted.values import ascii_int

__all__ = ["parse_address"]


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (``:8080`` = all interfaces, ``[::1]:8080`` for IPv6) into its parts."""
    host, sep, port_text = address.rpartition(":")
    try:
        port = ascii_int(port_text, what="metrics address port", lo=0, hi=65535) if sep else -1
    except UntrustedValueError:
        port = -1
    if port < 0:
        raise ConfigError(f"metrics address {address!r}: expected host:port, e.g. :8080 or 127.0.0.1:8080")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(f"metrics address {address!r}: put an IPv6 host in brackets, e.g. [::1]:8080")
    return host or "0.0.0.0", port  # noqa: S104 -- ":port" means every interface, on purpose
