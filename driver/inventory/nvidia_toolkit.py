"""The NVIDIA Container Toolkit's CDI spec on this node, and whether a runtime could apply its devices.

The toolkit (``nvidia-ctk cdi generate``, or its ``nvidia-cdi-refresh`` service) writes a spec of kind
``nvidia.com/gpu`` into a CDI dir, usually ``/etc/cdi/nvidia.yaml`` or ``/var/run/cdi/nvidia.yaml``:
one device per GPU named by its NVML index, one named by its UUID (``GPU-...``), and ``all``. The
spec's common edits carry what a CUDA container needs from the driver (libraries and tools as
read-only mounts, the control device nodes, the ``nvidia-cdi-hook`` hooks that make the SONAME
links and update the container's loader cache). A claim that returns ``nvidia.com/gpu=<UUID>`` next
to numadra's own CDI device gets all of that from the runtime.

The files are another program's, in a directory others write to, so they are read under the
safe-read rules (:func:`driver.untrusted.files.open_regular`: a symbolic link is not followed,
only regular files up to :data:`MAX_SPEC_BYTES`), decoded and checked field by field
(:mod:`driver.inventory.cdi_document`: a wrong type or a YAML alias refuses the file, naming the
field, and the file is skipped with a warning while the other specs serve), and checked before a
claim names one of their devices: a runtime that cannot apply an edit fails the container, so a
device whose mount source is missing, whose device node is not a character device, or whose hook
is not an executable file on the host is refused with the reason (:meth:`ToolkitSpecs.check`), and
so is one whose paths resolve through a link or directory that someone other than root could
change (:func:`~driver.untrusted.hostpaths.check_host_path_for_container`): the claim then falls
back to the driver root, whose files pass the same check. Which definition counts follows CDI's
rules: of the dirs, later ones override earlier ones; a name defined twice in one dir is a
conflict, which makes the device unusable.

Each file is parsed and checked once per version, (device, inode, size, mtime) of the descriptor
that was read: a lookup per prepare costs an ``lstat`` per unchanged file, never a parse, and
never a listing of a dir whose spec names did not change (:class:`~driver.inventory.dirnames.DirNames`:
numadra's own CDI dir holds a spec per prepared claim), and
:meth:`ToolkitSpecFinder.find` may be called before a prepare takes its locks to pay for a
changed file there.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cdi import ContainerEdits, Spec, validate_spec
from cdi.spec import CdiSpecError
from driver.errors import UntrustedHostPathError, UntrustedValueError
from driver.inventory.cdi_document import decode_spec_document, spec_from_document
from driver.inventory.dirnames import DirNames
from driver.inventory.hostfiles import host_join, resolve_in_root
from driver.log import get_logger
from driver.untrusted.files import open_regular, read_from
from driver.untrusted.hostpaths import CheckedDirs, check_host_path_for_container

__all__ = [
    "MAX_SPEC_BYTES",
    "TOOLKIT_KIND",
    "ToolkitDevice",
    "ToolkitSpecFinder",
    "ToolkitSpecs",
]

# ruff: noqa: PTH116 - os.lstat/os.stat on resolved host paths

#: the kind the toolkit's spec declares
TOOLKIT_KIND = "nvidia.com/gpu"
#: a spec file larger than this is not read (the toolkit's is a few KB per GPU)
MAX_SPEC_BYTES = 4 << 20
_KIND_BYTES = TOOLKIT_KIND.encode()

_log = get_logger("inventory")


class _NotToolkitError(Exception):
    """A spec of another kind: not the toolkit's, nothing to report."""


@dataclass(frozen=True, slots=True)
class ToolkitDevice:
    """One device of a toolkit spec, as the runtime would apply it."""

    name: str
    path: str  # the spec file that defines it
    edits: ContainerEdits  # the device's own edits
    common: ContainerEdits  # the spec's edits, applied with any of its devices
    conflict: str = ""  # another file of the same dir defines the name too

    @property
    def cdi_id(self) -> str:
        """The qualified CDI device ID (``nvidia.com/gpu=GPU-...``)."""
        return f"{TOOLKIT_KIND}={self.name}"


@dataclass(frozen=True, slots=True)
class ToolkitSpecs:
    """The toolkit specs found in the CDI dirs (see the module docstring)."""

    host_root: str
    dirs: tuple[str, ...]
    files: tuple[str, ...] = ()  # spec files of the toolkit's kind
    devices: Mapping[str, ToolkitDevice] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # files of the toolkit's kind that cannot be used, with why

    def check(self, name: str) -> str:
        """Why the runtime could not apply device ``name`` on this host; "" when it could."""
        device = self.devices.get(name)
        if device is None:
            where = ", ".join(self.files) or f"the CDI dirs {', '.join(self.dirs)}"
            return f"{where}: no device {name!r}"
        if device.conflict:
            return device.conflict
        dirs: dict[str, str] = {}  # resolved parent dirs, for this check only
        checked = CheckedDirs()  # parent dirs checked for containers, for this check only
        for edits in (device.common, device.edits):
            problem = _check_edits(self.host_root, edits, dirs, checked)
            if problem:
                return f"{device.path}: device {name!r}: {problem}"
        return ""


def _stat_in_root(
    host_root: str, host_path: str, dirs: dict[str, str], checked: CheckedDirs
) -> tuple[str, os.stat_result] | str:
    """The resolved path and its stat, or why there is none (or why a container may not get it)."""
    try:
        resolved = resolve_in_root(host_root, host_path, dirs)
        found = resolved, os.stat(host_join(host_root, resolved), follow_symlinks=False)
    except OSError as exc:
        return f"{host_path} does not exist on the host ({exc.strerror or exc})"
    try:
        check_host_path_for_container(host_root, host_path, dirs=checked)
    except UntrustedHostPathError as exc:
        return f"{host_path} is not given to containers: {exc.reason}"
    return found


def _check_edits(host_root: str, edits: ContainerEdits, dirs: dict[str, str], checked: CheckedDirs) -> str:
    for node in edits.device_nodes:
        host_path = node.host_path or node.path
        found = _stat_in_root(host_root, host_path, dirs, checked)
        if isinstance(found, str):
            return f"device node {found}"
        if not stat.S_ISCHR(found[1].st_mode):
            return f"device node {host_path} is not a character device"
    for mount in edits.mounts:
        found = _stat_in_root(host_root, mount.host_path, dirs, checked)
        if isinstance(found, str):
            return f"mount source {found}"
    for hook in edits.hooks:
        found = _stat_in_root(host_root, hook.path, dirs, checked)
        if isinstance(found, str):
            return f"hook {found}"
        if not stat.S_ISREG(found[1].st_mode) or not found[1].st_mode & 0o111:
            return f"hook {hook.path} is not an executable file"
    return ""


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What tells one version of a file from another without reading it."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _parse(path: str, data: bytes) -> Spec:
    """A toolkit spec from its bytes; UntrustedValueError (or CdiSpecError) naming the file and the
    field when it is not one, _NotToolkitError when it is a spec of another kind."""
    document = decode_spec_document(path, data)
    if not isinstance(document, dict) or document.get("kind") != TOOLKIT_KIND:
        raise _NotToolkitError
    try:
        spec = spec_from_document(document)
    except UntrustedValueError as exc:
        raise UntrustedValueError(f"{path}: {exc.what}", exc.reason) from None
    validate_spec(spec)
    return spec


_Parsed = Spec | str | None  # a spec, why the file cannot be used, or not the toolkit's


class ToolkitSpecFinder:
    """Finds the toolkit's specs in CDI dirs (lowest priority first), numadra's view of each dir.

    ``skip_prefix`` names files numadra wrote itself (its per-claim specs), which are never read.
    Thread-safe: prepares run on several threads.
    """

    def __init__(self, host_root: str, dirs: Sequence[str], *, skip_prefix: str = "") -> None:
        self.host_root = host_root
        self.dirs = tuple(dirs)
        self._skip = skip_prefix
        self._cache: dict[str, tuple[tuple[int, int, int, int], _Parsed]] = {}
        self._lock = threading.Lock()
        #: the dirs' spec names, listed again only when one came or went (numadra's own claim
        #: specs, one per prepared claim, never cause a listing)
        self._names = DirNames(self.dirs, self._is_spec_name)

    def _load(self, path: str) -> _Parsed:
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return f"{path}: a symbolic link (not followed in a shared CDI dir)"
        with self._lock:
            cached = self._cache.get(path)
        if cached is not None and cached[0] == _identity(st):
            return cached[1]  # unchanged since it was parsed: never parsed twice
        parsed: _Parsed
        key = _identity(st)
        try:
            fd, opened = open_regular(path)
            try:
                key = _identity(opened)  # what was read, not what lstat saw before
                data = read_from(fd, opened, path, MAX_SPEC_BYTES)
            finally:
                os.close(fd)
            parsed = _parse(path, data) if _KIND_BYTES in data else None
        except _NotToolkitError:
            parsed = None
        except OSError as exc:
            parsed = f"{path}: cannot be read ({exc})"
        except UntrustedValueError as exc:
            parsed = str(exc)  # names the file and the field
        except CdiSpecError as exc:
            parsed = f"{path}: {exc}"
        if isinstance(parsed, str):  # once per version of the file: the result is kept
            _log.warning("CDI spec skipped", path=path, kind=TOOLKIT_KIND, reason=parsed)
        with self._lock:
            self._cache[path] = (key, parsed)
        return parsed

    def _is_spec_name(self, name: str) -> bool:
        """A name CDI reads as a spec and numadra did not write."""
        return (
            name.endswith((".json", ".yaml"))
            and not name.startswith(".")
            and not (self._skip and name.startswith(self._skip))
        )

    def find(self) -> ToolkitSpecs:
        """The toolkit specs of the dirs as they are now (see the module docstring)."""
        files: list[str] = []
        problems: list[str] = []
        devices: dict[str, ToolkitDevice] = {}
        seen: set[str] = set()
        for directory in self.dirs:
            here: dict[str, ToolkitDevice] = {}
            for name in self._names.names(directory):
                path = os.path.join(directory, name)  # noqa: PTH118
                seen.add(path)
                parsed = self._load(path)
                if parsed is None:
                    continue
                if isinstance(parsed, str):
                    problems.append(parsed)
                    continue
                files.append(path)
                for dev in parsed.devices:
                    other = here.get(dev.name)
                    conflict = (
                        f"device {dev.name!r} is defined in both {other.path} and {path}" if other else ""
                    )
                    here[dev.name] = ToolkitDevice(dev.name, path, dev.edits, parsed.edits, conflict)
            devices.update(here)  # a later dir overrides an earlier one
        with self._lock:
            for path in [p for p in self._cache if p not in seen]:
                del self._cache[path]
        return ToolkitSpecs(self.host_root, self.dirs, tuple(files), devices, tuple(problems))
