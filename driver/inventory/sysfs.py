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

from driver.inventory.cpulist import parse_cpulist
from driver.untrusted.files import read_file

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
#: an integer attribute longer than this is no count or id (int64 is 19 digits, "0x" + 16 in hex)
_MAX_INT_TEXT = 24


def parse_count(text: str) -> int | None:
    """A decimal count or id taken from a kernel file's text (a distance, a MemTotal, a minor), or None.

    ``str.isdigit`` and ``int`` accept far more than the kernel writes: non-ASCII digits (``"²"``
    is a digit to ``isdigit`` but no number to ``int``) and thousands of digits (``int`` refuses
    those with ValueError, after a quadratic conversion). Every such token of a host file goes
    through here, so none of them can raise out of discovery.
    """
    if not text or len(text) > _MAX_INT_TEXT or not text.isascii() or not text.isdigit():
        return None
    return int(text)


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
    if text is None or len(text) > _MAX_INT_TEXT or not text.isascii():
        return None
    try:
        return int(text, base)
    except ValueError:
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
