"""Addresses of a host network interface in CIDR form, for a claim's ``networkData``.

The real source asks the kernel through ``ip -j addr show dev IF`` (iproute2 speaks netlink and
knows every address with its prefix); without ``ip`` it falls back to ``/proc/net/if_inet6`` for
IPv6 and the SIOCGIFADDR/SIOCGIFNETMASK ioctls for the primary IPv4 address. Fixture trees have
no kernel behind them, so tests inject an :data:`IpSource`.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import socket
import struct
import subprocess
from collections.abc import Callable, Sequence

__all__ = ["IpSource", "host_ip_source", "ips_from_ip_json"]

IpSource = Callable[[str], Sequence[str]]  # interface name -> ["192.0.2.5/24", "2001:db8::5/64"]

_SIOCGIFADDR = 0x8915
_SIOCGIFNETMASK = 0x891B


def ips_from_ip_json(text: str) -> list[str]:
    """CIDR addresses from ``ip -j addr`` output; link-local and host-scope addresses are left out."""
    out: list[str] = []
    for link in json.loads(text or "[]"):
        for info in link.get("addr_info") or []:
            if info.get("scope") in ("link", "host") or "local" not in info:
                continue
            out.append(f"{info['local']}/{info.get('prefixlen', 128 if ':' in info['local'] else 32)}")
    return out


def _ip_command(interface: str) -> list[str] | None:
    try:
        done = subprocess.run(
            ["ip", "-j", "addr", "show", "dev", interface],
            capture_output=True,
            text=True,
            timeout=2,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return [] if "does not exist" in done.stderr else None
    return ips_from_ip_json(done.stdout)


def _proc_and_ioctl(interface: str) -> list[str]:
    out: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        packed = struct.pack("256s", interface.encode()[:15])
        try:
            addr = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, packed)[20:24])
            mask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), _SIOCGIFNETMASK, packed)[20:24])
            found = ipaddress.IPv4Interface(f"{addr}/{mask}")
            if not (found.is_loopback or found.is_link_local):
                out.append(str(found))
        except OSError:
            pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as fh:  # noqa: PTH123
            for line in fh:
                fields = line.split()
                if len(fields) == 6 and fields[5] == interface and fields[3] == "00":  # global scope
                    address = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
                    out.append(f"{address}/{int(fields[2], 16)}")
    except OSError:
        pass
    return out


def host_ip_source(host_root: str = "/") -> IpSource:
    """The real source for this host's network namespace; empty answers for a fixture host root."""
    if os.path.realpath(host_root) != "/":
        return lambda _interface: []

    def source(interface: str) -> Sequence[str]:
        found = _ip_command(interface)
        return found if found is not None else _proc_and_ioctl(interface)

    return source
