"""Write ``cpuset.cpus`` / ``cpuset.mems`` of a cgroup directly, on cgroup v1, v2 or hybrid hosts.

Facts this module relies on (measured on the CI host, see docs/pinning.md):

* v1 (and hybrid hosts where cpuset is bound to v1): the hierarchy is the ``cgroup`` mount with
  the ``cpuset`` option, usually ``/sys/fs/cgroup/cpuset``. ``mems`` is written before ``cpus``
  (a cgroup with empty mems accepts no task), and a child must stay inside its parent's set.
* v2: the unified ``cgroup2`` mount; the parent must list ``cpuset`` in ``cgroup.subtree_control``
  before a child has the files, so every missing ancestor is enabled on the way down.
* Writes go through ``os.open``/``os.write``: a buffered ``open().write()`` may report a kernel
  refusal (EINVAL, ERANGE, ENOSPC) only when garbage-collected, where the error is lost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from driver.errors import PinningError
from driver.log import get_logger
from driver.pinning.backend import PinningKind, PinTarget
from driver.pinning.types import CpuAssignment, format_cpulist
from driver.untrusted.files import read_file_text

__all__ = [
    "CgroupLayout",
    "CgroupfsBackend",
    "CpusetHierarchy",
    "detect_cpuset_hierarchy",
    "detect_layout",
    "parse_mountinfo",
    "parse_proc_cgroup",
]

_log = get_logger("pinning.cgroupfs")
#: a procfs or cgroup file read here (``mountinfo`` is a line per mount: hosts with many
#: containers have thousands)
_MAX_PROC = 16 << 20


class CgroupLayout(StrEnum):
    """How the host mounts cgroups."""

    V1 = "v1"  # only legacy hierarchies
    V2 = "v2"  # only the unified hierarchy
    HYBRID = "hybrid"  # legacy hierarchies plus a cgroup2 mount (often /sys/fs/cgroup/unified)
    NONE = "none"


@dataclass(frozen=True, slots=True)
class _Mount:
    mount_point: Path
    fstype: str
    super_options: frozenset[str]


@dataclass(frozen=True, slots=True)
class CpusetHierarchy:
    """Where the cpuset controller lives and which cgroup version drives it."""

    version: int  # 1 or 2
    root: Path

    def path(self, cgroup: str) -> Path:
        """Directory of ``cgroup`` (as written in /proc/<pid>/cgroup) inside this hierarchy."""
        return self.root / cgroup.lstrip("/")


def parse_mountinfo(text: str) -> list[_Mount]:
    """The cgroup mounts listed in a /proc/<pid>/mountinfo text."""
    out: list[_Mount] = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if len(fields) < sep + 4 or len(fields) < 5:
            continue
        fstype = fields[sep + 1]
        if fstype not in {"cgroup", "cgroup2"}:
            continue
        mount_point = Path(fields[4].replace("\\040", " "))
        out.append(_Mount(mount_point, fstype, frozenset(fields[sep + 3].split(","))))
    return out


def detect_layout(mountinfo: str) -> CgroupLayout:
    """v1, v2 or hybrid, from the mounts (the kind of host matters for docs and errors)."""
    mounts = parse_mountinfo(mountinfo)
    v1 = any(m.fstype == "cgroup" for m in mounts)
    v2 = any(m.fstype == "cgroup2" for m in mounts)
    if v1 and v2:
        return CgroupLayout.HYBRID
    if v1:
        return CgroupLayout.V1
    if v2:
        return CgroupLayout.V2
    return CgroupLayout.NONE


def detect_cpuset_hierarchy(mountinfo_path: Path = Path("/proc/self/mountinfo")) -> CpusetHierarchy:
    """Find the hierarchy that owns cpuset: a v1 ``cpuset`` mount wins, else a cgroup2 with cpuset."""
    text = _read(mountinfo_path)
    mounts = parse_mountinfo(text)
    for m in mounts:
        if m.fstype == "cgroup" and "cpuset" in m.super_options:
            return CpusetHierarchy(version=1, root=m.mount_point)
    for m in mounts:
        if m.fstype != "cgroup2":
            continue
        try:
            controllers = read_file_text(m.mount_point / "cgroup.controllers", max_bytes=_MAX_PROC).split()
        except OSError:
            continue
        if "cpuset" in controllers:
            return CpusetHierarchy(version=2, root=m.mount_point)
    raise PinningError(
        f"no cpuset controller: neither a cgroup v1 'cpuset' mount nor a cgroup2 mount offering "
        f"cpuset in {mountinfo_path} (layout {detect_layout(text).value})"
    )


def parse_proc_cgroup(text: str, version: int) -> str:
    """The cpuset cgroup path from a /proc/<pid>/cgroup text ("3:cpuset:/a/b" or "0::/a/b")."""
    for line in text.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if version == 1 and "cpuset" in controllers.split(","):
            return path
        if version == 2 and hier == "0" and controllers == "":
            return path
    raise PinningError(f"no cgroup v{version} cpuset line in /proc/<pid>/cgroup: {text.strip()!r}")


def _write(path: Path, value: str) -> None:
    """Write one cgroup file so that the kernel's refusal surfaces here, with the path."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)  # O_TRUNC: like a shell ">"
    except OSError as exc:
        raise PinningError(f"open {path} for writing: {exc.strerror}") from exc
    try:
        os.write(fd, value.encode())
    except OSError as exc:
        raise PinningError(f"write {value!r} to {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    """Read a /proc or cgroup file; a failure names the path."""
    try:
        return read_file_text(path, max_bytes=_MAX_PROC)
    except OSError as exc:
        raise PinningError(f"read {path}: {exc.strerror}") from exc


class CgroupfsBackend:
    """``--pinning cgroupfs``: the container is a cgroup; write its cpuset files directly."""

    def __init__(self, hierarchy: CpusetHierarchy | None = None, proc_root: Path = Path("/proc")) -> None:
        self._hierarchy = hierarchy
        self._proc = proc_root

    @property
    def kind(self) -> PinningKind:
        """Always :attr:`PinningKind.CGROUPFS`."""
        return PinningKind.CGROUPFS

    @property
    def hierarchy(self) -> CpusetHierarchy:
        """The cpuset hierarchy, detected on first use when not given."""
        if self._hierarchy is None:
            self._hierarchy = detect_cpuset_hierarchy(self._proc / "self" / "mountinfo")
        return self._hierarchy

    def cgroup_of(self, pid: int) -> str:
        """The cpuset cgroup of a process, as /proc/<pid>/cgroup names it."""
        return parse_proc_cgroup(_read(self._proc / str(pid) / "cgroup"), self.hierarchy.version)

    def resolve(self, target: PinTarget) -> Path:
        """Directory of the target's cgroup (from ``cgroup``, else from ``pid``)."""
        if target.cgroup is not None:
            rel = target.cgroup
        elif target.pid is not None:
            rel = self.cgroup_of(target.pid)
        else:
            raise PinningError("cgroupfs pinning needs a cgroup path or a pid")
        directory = self.hierarchy.path(rel)
        if directory == self.hierarchy.root:
            # the root cpuset holds every host process: narrowing it would pin the whole machine
            raise PinningError(f"refusing to write the root cgroup {directory} (target {target})")
        if not directory.is_dir():
            raise PinningError(f"cgroup directory {directory} does not exist")
        return directory

    def apply(self, target: PinTarget, assignment: CpuAssignment) -> None:
        """Write mems then cpus of the target cgroup (v2: enable cpuset on the ancestors first)."""
        self.write_cpuset(self.resolve(target), assignment.cpus, assignment.mems)

    def write_cpuset(self, directory: Path, cpus: frozenset[int], mems: frozenset[int]) -> None:
        """Set a cgroup's cpus/mems; an empty set leaves that file alone."""
        if self.hierarchy.version == 2:
            self._enable_v2(directory)
        if mems:
            _write(directory / "cpuset.mems", format_cpulist(mems))
        if cpus:
            _write(directory / "cpuset.cpus", format_cpulist(cpus))
        _log.info(
            "cpuset written",
            path=str(directory),
            cpus=format_cpulist(cpus),
            mems=format_cpulist(mems),
            cgroup_version=self.hierarchy.version,
        )

    def release(self, target: PinTarget) -> None:
        """Widen the cgroup again: the parent's sets on v1, "inherit" (empty) on v2."""
        directory = self.resolve(target)
        if self.hierarchy.version == 2:
            _write(directory / "cpuset.cpus", "")
            _write(directory / "cpuset.mems", "")
            return
        parent = directory.parent
        _write(directory / "cpuset.mems", _read(parent / "cpuset.mems").strip())
        _write(directory / "cpuset.cpus", _read(parent / "cpuset.cpus").strip())

    def _enable_v2(self, directory: Path) -> None:
        """Make sure every ancestor from the root down lists ``cpuset`` in subtree_control."""
        root = self.hierarchy.root
        try:
            rel = directory.relative_to(root)
        except ValueError as exc:
            raise PinningError(f"cgroup {directory} is outside the cpuset hierarchy {root}") from exc
        parent = root
        for part in rel.parts:
            control = parent / "cgroup.subtree_control"
            if "cpuset" not in _read(control).split():
                _write(control, "+cpuset")
            parent = parent / part
