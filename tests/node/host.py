"""What the node tier changes on the host, recorded before and undone after.

The kubelet and containerd write outside the directories they are given (tests/node/README.md,
"host side effects"): the kubelet's device-plugin socket under /var/lib/kubelet, symlinks in
/var/log/containers, a bind mount of its root dir onto itself (left after it exits), three
sysctls (``protectKernelDefaults: false``) and cgroups under its ``cgroupRoot`` in every v1
hierarchy; containerd's shims put sockets in /run/containerd/s. :class:`HostRecord` takes a
snapshot of exactly those places, and :meth:`HostRecord.restore` puts them back: unmount what was
mounted under the watched paths, remove what was created there (deepest first), write the sysctls
back and rmdir the test's cgroups. :meth:`HostRecord.differences` is what the host-clean test
asserts empty.

Only the watched places are compared: other processes on a shared CI machine may mount or make
cgroups of their own at the same time, and those are not ours to judge or remove.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SYSCTLS", "WATCHED_PATHS", "HostRecord", "cgroup_hierarchies", "mount_points"]

#: the sysctls the kubelet sets with protectKernelDefaults: false, and the one the CNI bridge
#: plugin sets for a gateway bridge
SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward")
#: network interfaces the tier may create (the CNI bridge); veths go with their pod's netns
OWN_INTERFACE_PREFIX = "nnode"
#: host directories the kubelet, containerd, the CRI plugin or CNI may write into whatever their
#: configured directories say (plus the defaults the tier overrides, in case an override is lost)
WATCHED_PATHS = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/run/containerd",
    "/var/lib/containerd",
    "/opt/containerd",
    "/run/netns",
    "/var/lib/cni",
    "/etc/cni",
    "/opt/cni",
    "/run/nri",
    "/opt/nri",
    "/etc/nri",
    "/var/run/cdi",
    "/etc/cdi",
    "/etc/kubernetes",
)


def mount_points() -> list[str]:
    """Every mount point of this mount namespace, in mount order (mountinfo field 5, unescaped)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        out.append(point.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\"))
    return out


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1 controllers, named ones and the v2 tree)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        if post.split()[0] in ("cgroup", "cgroup2"):
            out.append(Path(pre.split()[4]))
    return out


def _tree(root: Path) -> set[str]:
    """Every path under ``root`` (itself included if it exists), without following symlinks."""
    if not os.path.lexists(root):
        return set()
    found = {str(root)}
    if root.is_symlink() or not root.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            found.add(str(Path(dirpath) / name))
    return found


def _interfaces() -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir()}


def _tasks(cgroup: Path) -> set[int]:
    try:
        return {int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()}
    except OSError:
        return set()


def _read_sysctl(name: str) -> str:
    return (Path("/proc/sys") / name).read_text().strip()


@dataclass
class HostRecord:
    """A snapshot of the watched host state; ``cgroup_root``: the kubelet's cgroupRoot (one element)."""

    cgroup_root: str
    own_dirs: tuple[Path, ...]
    paths: set[str] = field(default_factory=set)
    mounts: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    interfaces: set[str] = field(default_factory=set)
    restored: list[str] = field(default_factory=list)

    @classmethod
    def take(cls, cgroup_root: str, own_dirs: tuple[Path, ...]) -> HostRecord:
        record = cls(cgroup_root.strip("/"), own_dirs)
        for watched in WATCHED_PATHS:
            record.paths |= _tree(Path(watched))
        record.mounts = [m for m in mount_points() if record._watched(m)]
        record.sysctls = {name: _read_sysctl(name) for name in SYSCTLS}
        record.interfaces = _interfaces()
        return record

    def _watched(self, path: str) -> bool:
        roots = [*WATCHED_PATHS, *(str(d) for d in self.own_dirs)]
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

    def _our_cgroups(self) -> list[Path]:
        """Every cgroup directory under the test's cgroupRoot, in every hierarchy, deepest first."""
        found: list[Path] = []
        for hierarchy in cgroup_hierarchies():
            top = hierarchy / self.cgroup_root
            if top.is_dir():
                found.extend(Path(d) for d, _, _ in os.walk(top))
        return sorted(found, key=lambda p: len(p.parts), reverse=True)

    def _our_processes(self) -> list[str]:
        """Processes whose command line names one of the test's dirs (a containerd shim names its
        containerd's socket there): none may outlive the run."""
        marks = [str(d) for d in self.own_dirs]
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(mark in cmdline for mark in marks):
                found.append(f"{proc.name}: {cmdline.strip()[:200]}")
        return found

    def differences(self) -> dict[str, list[str]]:
        """What differs from the snapshot now (empty when the host is as found)."""
        now_paths: set[str] = set()
        for watched in WATCHED_PATHS:
            now_paths |= _tree(Path(watched))
        own_left = [str(d) for d in self.own_dirs if os.path.lexists(d)]
        diff = {
            "paths created": sorted(now_paths - self.paths),
            "paths removed": sorted(self.paths - now_paths),
            "mounts added": sorted({m for m in mount_points() if self._watched(m)} - set(self.mounts)),
            "sysctls changed": sorted(
                f"{k}: {v} -> {_read_sysctl(k)}" for k, v in self.sysctls.items() if _read_sysctl(k) != v
            ),
            "cgroups left": [str(p) for p in self._our_cgroups()],
            "interfaces added": sorted(_interfaces() - self.interfaces),
            "processes left": self._our_processes(),
            "test dirs left": own_left,
        }
        return {k: v for k, v in diff.items() if v}

    def restore(self) -> list[str]:
        """Undo everything the run left in the watched places; what was undone, as lines."""
        done: list[str] = []
        # 1. mounts under watched paths or our dirs (the kubelet's rshared root-dir bind mount,
        #    sandbox shm mounts), deepest first; lazily if busy, as the kubelet itself does
        added = [m for m in mount_points() if self._watched(m) and m not in self.mounts]
        for point in sorted(set(added), key=len, reverse=True):
            for _ in range(added.count(point)):  # a path can be mounted over more than once
                res = subprocess.run(["umount", point], capture_output=True, text=True, check=False)
                if res.returncode != 0:
                    subprocess.run(["umount", "-l", point], capture_output=True, check=False)
                done.append(f"umount {point}")
        # 2. paths created under the watched dirs
        now_paths: set[str] = set()
        for watched in WATCHED_PATHS:
            now_paths |= _tree(Path(watched))
        for path in sorted(now_paths - self.paths, key=lambda p: p.count("/"), reverse=True):
            p = Path(path)
            with contextlib.suppress(FileNotFoundError):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink()
                done.append(f"rm {path}")
        # 3. our network interfaces (the CNI bridge), then sysctls
        for name in sorted(_interfaces() - self.interfaces):
            if name.startswith(OWN_INTERFACE_PREFIX):
                subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
                done.append(f"ip link del {name}")
        for name, value in self.sysctls.items():
            if _read_sysctl(name) != value:
                (Path("/proc/sys") / name).write_text(value + "\n")
                done.append(f"sysctl {name.replace('/', '.')}={value}")
        # 4. cgroups, deepest first. A cgroup with tasks cannot go: retry while they exit; a task
        #    still in the test's own cgroupRoot after 5 s is a container process the runtime left
        #    behind (it is ours by where it is), so it is killed.
        deadline = time.monotonic() + 10
        killed: set[int] = set()
        while True:
            left = self._our_cgroups()
            for cg in left:
                with contextlib.suppress(OSError):
                    cg.rmdir()
                    done.append(f"rmdir {cg}")
            left = self._our_cgroups()
            if not left or time.monotonic() > deadline:
                break
            if time.monotonic() > deadline - 5:
                for cg in left:
                    for pid in _tasks(cg) - killed:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                        killed.add(pid)
                        done.append(f"kill -9 {pid} (left in {cg})")
            time.sleep(0.2)
        # 5. the test's own directories
        for own in self.own_dirs:
            if os.path.lexists(own):
                shutil.rmtree(own, ignore_errors=True)
                done.append(f"rm -r {own}")
        self.restored.extend(done)
        return done
