"""Where a NIC's netdev is now, and its addresses in CIDR form, for health and ``networkData``.

Interface names change after discovery (udev renames, a move into a pod's namespace) while the PCI
function does not, so :func:`netdev_dir` finds the netdev under the function, for the health
signals and the claim status alike.

The real source asks the kernel itself over rtnetlink (one RTM_GETADDR dump, what ``ip -j addr
show dev IF`` does), in process: the claim status writer asks once per NIC per prepared claim, and
a child process per call (``ip``) costs a fork, an exec and the child's own start-up, where the
dump is one request and one answer on a socket. Where netlink cannot be opened it runs
``ip``, and without ``ip`` it falls back to ``/proc/net/if_inet6`` for IPv6 and the
SIOCGIFADDR/SIOCGIFNETMASK ioctls for the primary IPv4 address. Fixture trees have no kernel
behind them, so tests inject an :data:`IpSource`.
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
from driver.untrusted.files import read_file_text
from driver.untrusted.values import ascii_int

__all__ = ["IpSource", "host_ip_source", "ips_from_ip_json", "netdev_dir", "netlink_ips"]

# ruff: noqa: PTH112, PTH118 - os.path on purpose: asked for every NIC on every poll (see inventory/sysfs.py)

IpSource = Callable[[str], Sequence[str]]  # interface name -> ["192.0.2.5/24", "2001:db8::5/64"]

_SIOCGIFADDR = 0x8915
#: /proc/net/if_inet6 holds one short line per address: far more than any host has fit
_MAX_PROC_TABLE = 4 << 20
_SIOCGIFNETMASK = 0x891B
# rtnetlink (linux/netlink.h, linux/rtnetlink.h, linux/if_addr.h)
_NETLINK_ROUTE = 0
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_RTM_NEWADDR, _RTM_GETADDR = 20, 22
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_RT_SCOPE_LINK, _RT_SCOPE_HOST = 253, 254
_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, interface index
_RTATTR = struct.Struct("=HH")  # length, type


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


def netlink_ips(interface: str) -> list[str]:
    """The interface's addresses in CIDR form from one rtnetlink dump, as :func:`ips_from_ip_json`
    reads them from ``ip -j addr``: IPv4 then IPv6 in the kernel's order, the local address (not a
    point-to-point peer), link-local and host-scope ones left out; [] for an unknown interface.

    Raises ``OSError`` when netlink cannot be asked, or answers with an error.
    """
    try:
        index = socket.if_nametoindex(interface)
    except OSError:
        return []  # no such interface (here)
    out: list[str] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_ROUTE) as sock:
        sock.settimeout(2.0)
        request = _NLMSG.pack(_NLMSG.size + _IFADDRMSG.size, _RTM_GETADDR, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
        sock.sendall(request + _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        while True:
            data = sock.recv(65536)
            offset = 0
            while offset + _NLMSG.size <= len(data):
                length, kind, _, sequence, _ = _NLMSG.unpack_from(data, offset)
                if length < _NLMSG.size or offset + length > len(data):
                    raise OSError("malformed netlink answer")
                if sequence == 1:
                    if kind == _NLMSG_DONE:
                        return out
                    if kind == _NLMSG_ERROR:
                        (code,) = struct.unpack_from("=i", data, offset + _NLMSG.size)
                        if code == 0:  # an acknowledgement: the dump is over
                            return out
                        raise OSError(-code, f"netlink RTM_GETADDR: {os.strerror(-code)}")
                    if kind == _RTM_NEWADDR:
                        found = _address(data[offset + _NLMSG.size : offset + length], index)
                        if found:
                            out.append(found)
                offset += (length + 3) & ~3
            if not data:
                raise OSError("netlink closed before the end of the dump")


def _address(message: bytes, index: int) -> str:
    """One RTM_NEWADDR message's address as "addr/prefix" when it is a wanted one of ``index``."""
    if len(message) < _IFADDRMSG.size:
        return ""
    family, prefix, _, scope, owner = _IFADDRMSG.unpack_from(message)
    if owner != index or scope in (_RT_SCOPE_LINK, _RT_SCOPE_HOST):
        return ""
    if family not in (socket.AF_INET, socket.AF_INET6):
        return ""
    attrs: dict[int, bytes] = {}
    offset = _IFADDRMSG.size
    while offset + _RTATTR.size <= len(message):
        length, kind = _RTATTR.unpack_from(message, offset)
        if length < _RTATTR.size:
            break
        attrs[kind] = message[offset + _RTATTR.size : offset + length]
        offset += (length + 3) & ~3
    raw = attrs.get(_IFA_LOCAL) or attrs.get(_IFA_ADDRESS)
    if raw is None or len(raw) != (4 if family == socket.AF_INET else 16):
        return ""
    return f"{socket.inet_ntop(family, raw)}/{prefix}"


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
        table = read_file_text("/proc/net/if_inet6", max_bytes=_MAX_PROC_TABLE)
    except OSError:
        return out
    for line in table.splitlines():
        fields = line.split()
        if len(fields) == 6 and fields[5] == interface and fields[3] == "00":  # global scope
            try:
                address = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
                out.append(f"{address}/{ascii_int(fields[2], what='if_inet6 prefix', lo=0, hi=128, base=16)}")
            except ValueError:
                continue
    return out


def host_ip_source(host_root: str = "/") -> IpSource:
    """The real source for this host's network namespace; empty answers for a fixture host root."""
    if not is_live_host(host_root):
        return lambda _interface: []

    def source(interface: str) -> Sequence[str]:
        try:
            return netlink_ips(interface)
        except OSError:
            pass
        found = _ip_command(interface)
        return found if found is not None else _proc_and_ioctl(interface)

    return source
