"""The sysfs/procfs reader of every layer: a missing or odd file reads as None, never raises.

Public because discovery is not its only user: the health monitor (``driver/health``) reads
carrier, AER counters and netdev links, and the claim status writer reads a NIC's live addresses,
all with the same rules.

Kernel files vanish under our feet (hot-unplug), differ between kernel versions and may hold
surprises on virtual machines, so every reader here turns "cannot read" into None and leaves the
choice of a default to the pure builder. A host tree is a directory too: ``--host-root`` may be a
mounted host or a fixture, so files are read through :func:`driver.untrusted.files.read_file`
(no link followed, no blocking open, regular files only, at most a page), and something else
planted at an attribute's path reads as None like a missing attribute. Paths are plain strings
and the ``os`` functions are used on purpose: discovery reads hundreds of files, and a
``pathlib`` object per path would cost more than the read itself (``bench/discover.py`` times
discovery).
"""

from __future__ import annotations

import os

from driver.errors import UntrustedValueError
from driver.inventory.cpulist import parse_cpulist
from driver.untrusted.files import read_file
from driver.untrusted.values import ascii_int

__all__ = [
    "is_live_host",
    "link_name",
    "link_target",
    "list_dir",
    "parse_count",
    "read_cpulist",
    "read_int",
    "read_text",
]

# ruff: noqa: PTH115, PTH118, PTH119, PTH120, PTH208 - os functions on purpose, see above

#: sysfs attributes are at most a page; the largest page size Linux has (arm64, powerpc)
_MAX_ATTRIBUTE = 1 << 16
#: no count or id of a kernel file is larger (u64)
_MAX_INT = (1 << 64) - 1


def parse_count(text: str) -> int | None:
    """A decimal count or id taken from a kernel file's text (a distance, a MemTotal, a minor), or None.

    ``str.isdigit`` and ``int`` accept far more than the kernel writes (non-ASCII digits, blanks,
    thousands of digits): :func:`~driver.untrusted.values.ascii_int` reads it, and anything it
    refuses is None, so no token of a host file can raise out of discovery.
    """
    try:
        return ascii_int(text, what="kernel count", lo=0, hi=_MAX_INT)
    except UntrustedValueError:
        return None


def read_text(path: str) -> str | None:
    """The stripped content of a small text file, or None when it cannot be read."""
    try:
        data = read_file(path, max_bytes=_MAX_ATTRIBUTE)
    except OSError:  # absent, unreadable, or refused (UntrustedFileError is an OSError)
        return None
    return data.decode("utf-8", errors="replace").strip()


def read_int(path: str, base: int = 10) -> int | None:
    """An integer file (``numa_node``, ``core_id``; ``base=16`` for ``0x10de``), or None."""
    text = read_text(path)
    if text is None:
        return None
    try:  # "-1" is the kernel's "none" (numa_node, speed); hex values carry "0x"
        return ascii_int(
            text.removeprefix("0x") if base == 16 else text, what=path, lo=-_MAX_INT, hi=_MAX_INT, base=base
        )
    except UntrustedValueError:
        return None


def read_cpulist(path: str) -> frozenset[int] | None:
    """A kernel list file ("0-3,8"), or None when missing or malformed."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def link_name(path: str) -> str | None:
    """The last component of a symlink's target (``driver`` -> ``mlx5_core``), or None."""
    try:
        target = os.readlink(path)
    except OSError:
        return None
    name = os.path.basename(target.rstrip("/"))
    if name in ("", ".", ".."):  # "../.." style: normalize lexically against the link's directory
        name = os.path.basename(os.path.normpath(os.path.join(os.path.dirname(path), target)))
    return name or None


def list_dir(path: str) -> list[str]:
    """Sorted entry names of a directory; an absent or unreadable directory is empty."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def link_target(path: str) -> str | None:
    """The raw target of a symlink (``../../devices/pci0000:00/...``), or None when not a link.

    sysfs links point into ``devices/``, where every directory is real, so the components of one
    target are all a caller needs; this is far cheaper than resolving every path component.
    """
    try:
        return os.readlink(path)
    except OSError:
        return None


def is_live_host(host_root: str | os.PathLike[str]) -> bool:
    """True when ``host_root`` is this machine's own root, not a fixture tree or a mounted host.

    Sources that describe only the machine we run on (NVML, the kernel's addresses) are asked
    only then; every caller decides it the same way, symlinks and "/." spellings included.
    """
    return os.path.realpath(os.fspath(host_root)) == "/"
