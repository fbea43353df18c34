"""Where a NIC's netdev is now, and its addresses in CIDR form, for health and ``networkData``.

Interface names change after discovery (udev renames, a move into a pod's namespace) while the PCI
function does not, so :func:`netdev_dir` finds the netdev under the function, for the health
signals and the claim status alike.

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
from collections.abc import Callable, Iterator, Sequence

from driver.inventory.sysfs import is_live_host, list_dir

__all__ = ["IpSource", "host_ip_source", "ips_from_ip_json", "netdev_dir"]

# ruff: noqa: PTH112, PTH118 - os.path on purpose: asked for every NIC on every poll (see inventory/sysfs.py)

IpSource = Callable[[str], Sequence[str]]  # interface name -> ["192.0.2.5/24", "2001:db8::5/64"]

_SIOCGIFADDR = 0x8915
_SIOCGIFNETMASK = 0x891B


def netdev_dir(pci_dir: str, interface: str) -> str | None:
    """The netdev directory of a PCI network function as seen now, or None when it is not visible.

    Looks under the function itself, then under its virtio children (cloud VMs): the discovered
    name first, else whatever name the netdev has now. Directories are listed only when needed,
    since the health monitor asks for every NIC on every poll.
    """
    for parent in _netdev_parents(pci_dir):
        net = os.path.join(parent, "net")
        named = os.path.join(net, interface)
        if os.path.isdir(named):
            return named
        for name in list_dir(net):
            if os.path.isdir(os.path.join(net, name)):
                return os.path.join(net, name)
    return None


def _netdev_parents(pci_dir: str) -> Iterator[str]:
    yield pci_dir
    for child in list_dir(pci_dir):
        if child.startswith("virtio"):
            yield os.path.join(pci_dir, child)


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
    if not is_live_host(host_root):
        return lambda _interface: []

    def source(interface: str) -> Sequence[str]:
        found = _ip_command(interface)
        return found if found is not None else _proc_and_ioctl(interface)

    return source
