"""The NVIDIA driver's user space on the host: the files a CUDA container needs from the driver root.

CUDA images carry the CUDA runtime but not the driver: ``libcuda.so``, ``libnvidia-ml.so`` and
``nvidia-smi`` must come from the host, at the version of the loaded kernel module. This module
finds them the way NVIDIA's CDI generator (nvcdi) does, so a claim's container gets the same set
whichever source supplies it:

* the version: ``/sys/module/nvidia/version``, else the ``Kernel Module`` line of
  ``/proc/driver/nvidia/version`` (under the host root: the module is the host's);
* the libraries: every ``lib*.so.<version>`` in the directories that hold ``libcuda.so.<version>``
  or ``libnvidia-ml.so.<version>`` (and their ``vdpau/``), searched in the multiarch, ``lib64`` and
  ``nvidia/current`` directories nvcdi searches, under the driver root;
* the SONAME links (``libcuda.so.1``, ``libnvidia-ml.so.1``, ...) the host has next to them: a
  CUDA program opens ``libcuda.so.1``, and without a hook that runs ``ldconfig`` in the container
  nothing would create that link there, so the library is also mounted under each link's name;
* the binaries ``nvidia-smi``, ``nvidia-debugdump``, ``nvidia-persistenced``, the MPS and IMEX
  tools (first match in the usual ``PATH`` directories);
* the GSP firmware ``/lib/firmware[/updates]/nvidia/<version>/gsp*.bin``;
* the IPC sockets of ``nvidia-persistenced`` and ``nvidia-fabricmanager`` and the MPS pipe
  directory, when they exist.

Every file is mounted read-only at the path it has under the driver root (the same layout the
toolkit's spec gives), the MPS pipe directory and the sockets read-write. Paths are resolved inside
the driver root (its absolute symlinks point into it, as in a driver container); a mount's host
path is the resolved file, so the runtime never follows a link, and it is made by
:func:`~driver.untrusted.hostpaths.check_host_path_for_container`: a file reached through a link
or directory that someone other than root could change (a ``/tmp/nvidia-mps`` planted as a link
to ``/etc``, or owned by a user) is left out, named in :attr:`DriverUserspace.refused` and logged,
and the container goes without it (without MPS, for the pipe directory). Required are
``libcuda.so.<version>`` (without it the root is not usable) and ``libnvidia-ml.so.<version>``
(named in :attr:`DriverUserspace.missing` when absent).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from cdi import CheckedHostPath
from driver.errors import UntrustedHostPathError
from driver.inventory.hostfiles import host_join, read_host_file, resolve_in_root
from driver.log import get_logger
from driver.untrusted.hostpaths import CheckedDirs, check_host_path_for_container

__all__ = [
    "BINARIES",
    "FILE_OPTIONS",
    "IPC_OPTIONS",
    "LIBRARY_DIRS",
    "DriverUserspace",
    "UserspaceMount",
    "discover_driver_userspace",
    "driver_version",
]

# ruff: noqa: PTH116 - os functions on purpose: lstat/stat per resolved path

#: where the driver's libraries are looked for, relative to the driver root (nvcdi's list)
LIBRARY_DIRS = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
    "/usr/lib",
)
#: the driver's tools a container may use (nvcdi's list)
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
_BINARY_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
_FIRMWARE_DIRS = ("/lib/firmware/updates/nvidia", "/lib/firmware/nvidia")
#: (candidates, wanted file type): the first candidate that exists is mounted
_IPC = (
    (("/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket"), stat.S_IFSOCK),
    (("/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket"), stat.S_IFSOCK),
    (("/tmp/nvidia-mps",), stat.S_IFDIR),
)
#: mount options of the driver's files and of its IPC endpoints (as nvcdi writes them)
FILE_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
IPC_OPTIONS = ("nosuid", "nodev", "rbind", "rprivate", "noexec")
_REQUIRED = ("libcuda.so", "libnvidia-ml.so")
_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+){1,3}")
_PROC_VERSION = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+([0-9]+(?:\.[0-9]+){1,3})\s")
_MAX_VERSION_FILE = 4096
_log = get_logger("inventory.nvidia_userspace")


@dataclass(frozen=True, slots=True)
class _Found:
    """One file of the driver found below the driver root, before its host path is checked."""

    resolved: str  # the file, resolved inside the driver root
    container_path: str
    kind: str
    options: tuple[str, ...] = FILE_OPTIONS


@dataclass(frozen=True, slots=True)
class UserspaceMount:
    """One file of the driver, mounted into a container."""

    host_path: CheckedHostPath  # where the file is on the host (the driver root included)
    container_path: str  # where the container sees it (its path under the driver root)
    kind: str  # "library", "library link", "binary", "firmware", "ipc": what the table counts
    options: tuple[str, ...] = FILE_OPTIONS


@dataclass(frozen=True, slots=True)
class DriverUserspace:
    """What the driver root offers a CUDA container; ``problem`` says why it offers nothing."""

    driver_root: str
    version: str | None = None
    library_dirs: tuple[str, ...] = ()  # paths under the driver root
    mounts: tuple[UserspaceMount, ...] = ()
    missing: tuple[str, ...] = ()  # required files not found ("libnvidia-ml.so.550.54.15")
    problem: str = ""
    #: files left out because a container must not be given them, each with why
    refused: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """True when the driver root has the driver's libraries (``libcuda.so.<version>``)."""
        return not self.problem

    def count(self, kind: str) -> int:
        """How many mounts of ``kind`` there are."""
        return sum(1 for m in self.mounts if m.kind == kind)


def _read_text(path: str) -> str | None:
    try:
        return read_host_file(path, limit=_MAX_VERSION_FILE).decode("utf-8", errors="replace")
    except OSError:
        return None


def driver_version(host_root: str) -> tuple[str | None, str]:
    """The loaded kernel module's version and the file that said so; or None and why not."""
    sys_file = host_join(host_root, "/sys/module/nvidia/version")
    text = _read_text(sys_file)
    if text is not None and _VERSION.fullmatch(text.strip()):
        return text.strip(), sys_file
    proc_file = host_join(host_root, "/proc/driver/nvidia/version")
    text = _read_text(proc_file)
    found = _PROC_VERSION.search(text + "\n") if text is not None else None
    if found is not None:
        return found.group(1), proc_file
    return None, f"no NVIDIA kernel module version in {sys_file} or {proc_file}"


def _kind_of(root: str, host_path: str) -> int | None:
    """The file type (``stat.S_IFMT``) at a resolved host path, or None when it is not there."""
    try:
        return stat.S_IFMT(os.stat(host_join(root, host_path), follow_symlinks=False).st_mode)
    except OSError:
        return None


def _resolve(root: str, path: str) -> str | None:
    try:
        return resolve_in_root(root, path)
    except OSError:
        return None


def _entries(root: str, directory: str) -> list[tuple[str, bool, bool]]:
    """(name, is a regular file, is a symlink) of a directory's entries, sorted; [] when unreadable."""
    try:
        with os.scandir(host_join(root, directory)) as it:
            return sorted(
                (e.name, e.is_file(follow_symlinks=False), e.is_symlink())
                for e in it
                if e.name.startswith("lib")
            )
    except OSError:
        return []


def _library_dirs(root: str, version: str) -> list[str]:
    """The resolved directories that hold ``libcuda.so.<v>`` or ``libnvidia-ml.so.<v>``, in search order."""
    found: list[str] = []
    for candidate in LIBRARY_DIRS:
        directory = _resolve(root, candidate)
        if directory is None or directory in found or _kind_of(root, directory) != stat.S_IFDIR:
            continue
        for lib in _REQUIRED:
            path = _resolve(root, f"{directory}/{lib}.{version}")
            if path is not None and _kind_of(root, path) == stat.S_IFREG:
                found.append(directory)
                break
    return found


def _libraries(root: str, directories: list[str], version: str) -> list[_Found]:
    """Every ``lib*.so.<version>`` of the driver's directories (and ``vdpau/``), then their links."""
    suffix = f".so.{version}"
    mounts: list[_Found] = []
    real: set[str] = set()
    for directory in [*directories, *(f"{d}/vdpau" for d in directories)]:
        for name, _, _ in _entries(root, directory):
            if not name.endswith(suffix):
                continue
            target = _resolve(root, f"{directory}/{name}")
            if target is not None and _kind_of(root, target) == stat.S_IFREG:
                mounts.append(_Found(target, f"{directory}/{name}", "library"))
                real.add(target)
    for directory in directories:
        for name, _, is_link in _entries(root, directory):
            if not is_link or ".so" not in name or name.endswith(suffix):
                continue
            target = _resolve(root, f"{directory}/{name}")
            if target in real:  # a SONAME or development link to one of the driver's libraries
                mounts.append(_Found(target, f"{directory}/{name}", "library link"))
    return mounts


def _binaries(root: str) -> list[_Found]:
    mounts: list[_Found] = []
    for name in BINARIES:
        for directory in _BINARY_DIRS:
            target = _resolve(root, f"{directory}/{name}")
            if target is None:
                continue
            try:
                st = os.stat(host_join(root, target), follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                mounts.append(_Found(target, f"{directory}/{name}", "binary"))
                break
    return mounts


def _firmware(root: str, version: str) -> list[_Found]:
    mounts: list[_Found] = []
    for base in _FIRMWARE_DIRS:
        directory = _resolve(root, f"{base}/{version}")
        if directory is None:
            continue
        try:
            with os.scandir(host_join(root, directory)) as it:
                names = sorted(e.name for e in it if e.is_file(follow_symlinks=False))
        except OSError:
            continue
        for name in names:
            if name.startswith("gsp") and name.endswith(".bin"):
                mounts.append(_Found(f"{directory}/{name}", f"{base}/{version}/{name}", "firmware"))
    return mounts


def _ipc(root: str) -> list[_Found]:
    mounts: list[_Found] = []
    for candidates, wanted in _IPC:
        for path in candidates:
            target = _resolve(root, path)
            if target is not None and _kind_of(root, target) == wanted:
                mounts.append(_Found(target, path, "ipc", IPC_OPTIONS))
                break
    return mounts


def discover_driver_userspace(host_root: str, driver_root: str = "/") -> DriverUserspace:
    """The driver's files under ``driver_root`` (a host path) as numadra sees it below ``host_root``."""
    version, where = driver_version(host_root)
    if version is None:
        return DriverUserspace(driver_root, problem=where)
    root = host_join(host_root, driver_root)
    directories = _library_dirs(root, version)
    libraries = _libraries(root, directories, version)
    names = {m.container_path.rpartition("/")[2] for m in libraries}
    missing = tuple(f"{lib}.{version}" for lib in _REQUIRED if f"{lib}.{version}" not in names)
    if not directories or f"libcuda.so.{version}" in missing:
        searched = ", ".join(LIBRARY_DIRS)
        return DriverUserspace(
            driver_root,
            version=version,
            missing=missing,
            problem=f"driver root {driver_root}: no {' or '.join(missing)} (driver {version}) in {searched}",
        )
    found = [*libraries, *_binaries(root), *_firmware(root, version), *_ipc(root)]
    mounts, refused = _checked(host_root, driver_root, found)
    return DriverUserspace(
        driver_root,
        version=version,
        library_dirs=tuple(directories),
        mounts=mounts,
        missing=missing,
        refused=refused,
    )


def _checked(
    host_root: str, driver_root: str, found: list[_Found]
) -> tuple[tuple[UserspaceMount, ...], tuple[str, ...]]:
    """The mounts whose host path a container may be given, and why each other one may not."""
    mounts: list[UserspaceMount] = []
    refused: list[str] = []
    dirs = CheckedDirs()  # the libraries share a few directories
    for m in found:
        try:
            host_path = check_host_path_for_container(
                host_root, m.container_path, inside=driver_root, dirs=dirs
            )
        except UntrustedHostPathError as exc:
            _log.warning(
                "driver file not given to containers", path=m.container_path, kind=m.kind, reason=exc.reason
            )
            refused.append(f"{m.container_path} ({m.kind}): {exc.reason}")
            continue
        mounts.append(UserspaceMount(host_path, m.container_path, m.kind, m.options))
    return tuple(mounts), tuple(refused)
