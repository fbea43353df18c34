"""The workload of the VM tier's pinned "containers" (guest side), and the reading of where it ran.

A container's process must touch its memory only once its cpuset is in force, as a runtime's
container does (runc's init joins the container's cgroup, then execs the workload). So the probe
starts as a shell that waits on stdin; whoever pins it (``numadra hook`` on its cgroup, or a
runtime stand-in that puts it into a cgroup configured from an NRI adjustment) then lets it go.
It then execs a Python that maps :data:`PROBE_BYTES` of private anonymous memory and writes one
byte per page (a page is placed on a node when it is first touched), prints the mapping's address
and waits, so ``/proc/<pid>/numa_maps`` can be read while the pages are still there.

Only the standard library: this runs in the guest before anything of numadra is imported.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "NODE_SYSFS",
    "PROBE_BYTES",
    "allowed",
    "measure",
    "meminfo_kb",
    "nodes",
    "page_counts",
    "release",
    "remove_cgroup",
    "spawn",
    "status",
]

PROBE_BYTES = 64 << 20
NODE_SYSFS = Path("/sys/devices/system/node")

#: run by the probe once released: map PROBE_BYTES private anonymous memory, write one byte per
#: page, print the mapping's address, then wait for stdin to close so numa_maps can be read
_PROBE = """
import ctypes, mmap, sys
size = int(sys.argv[1])
buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for off in range(0, size, mmap.PAGESIZE):
    buf[off] = 1
print(hex(ctypes.addressof(ctypes.c_char.from_buffer(buf))), flush=True)
sys.stdin.read()
"""

_NODE_PAGES = re.compile(r"\bN(\d+)=(\d+)\b")


def meminfo_kb(node: int) -> dict[str, int]:
    """``/sys/devices/system/node/nodeN/meminfo`` as {field: kB} ("Node 1 MemTotal: 123 kB")."""
    out: dict[str, int] = {}
    for line in (NODE_SYSFS / f"node{node}" / "meminfo").read_text().splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[4] == "kB":
            out[parts[2].rstrip(":")] = int(parts[3])
    return out


def nodes() -> list[int]:
    """The kernel's NUMA node ids."""
    return sorted(int(p.name[4:]) for p in NODE_SYSFS.glob("node[0-9]*"))


def status(pid: int, field: str) -> str:
    """One field of ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == field:
            return value.strip()
    raise KeyError(field)


def allowed(pid: int) -> dict[str, str]:
    """Where the kernel lets ``pid`` run and allocate now."""
    return {f: status(pid, f) for f in ("Cpus_allowed_list", "Mems_allowed_list")}


def page_counts(line: str) -> dict[str, int]:
    """``N<node>=<pages>`` of one numa_maps line, as {node: pages}."""
    return {node: int(pages) for node, pages in _NODE_PAGES.findall(line)}


def spawn(env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """A probe waiting to be released (see the module docstring); ``env``: the container's env.

    ``python3 -S``: the workload needs the standard library only, and skipping ``site`` saves a
    part of each start, which costs seconds under TCG."""
    return subprocess.Popen(
        ["sh", "-c", 'read go; exec python3 -S -c "$0" "$1"', _PROBE, str(PROBE_BYTES)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )


def release(child: subprocess.Popen[str]) -> None:
    """Let the probe exec its workload."""
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()


def measure(child: subprocess.Popen[str]) -> dict[str, Any]:
    """Wait for a released probe's memory to be touched; where its pages and CPUs are.

    ``probe_pages``: the probe's own mapping per node; ``anon_pages``: every pure anonymous mapping
    of the process (heap, stack, mmap) per node, all touched after the pin. A private file
    mapping's line also counts page-cache pages other processes may have read in on any node, so
    those are left out.
    """
    assert child.stdout is not None
    address = int(child.stdout.readline().strip() or "0", 16)
    numa_maps = Path(f"/proc/{child.pid}/numa_maps").read_text().splitlines()
    probe = [line for line in numa_maps if int(line.split()[0], 16) <= address][-1] if address else ""
    anonymous = [line for line in numa_maps if " anon=" in line and " file=" not in line]
    anon: dict[str, int] = {}
    for line in anonymous:
        for n, pages in page_counts(line).items():
            anon[n] = anon.get(n, 0) + pages
    return {
        "cpus_allowed_list": status(child.pid, "Cpus_allowed_list"),
        "mems_allowed_list": status(child.pid, "Mems_allowed_list"),
        "probe_address": hex(address),
        "probe_line": probe,
        "probe_pages": page_counts(probe),
        "anon_pages": anon,
        "anon_lines": anonymous,
        "page_kb": os.sysconf("SC_PAGESIZE") // 1024,
    }


def remove_cgroup(cgroup: Path) -> None:
    """Remove a cgroup whose tasks were killed (the kernel frees it shortly after the last exits)."""
    for _ in range(100):
        if not cgroup.exists():
            return
        try:
            cgroup.rmdir()
            return
        except OSError:
            time.sleep(0.05)
