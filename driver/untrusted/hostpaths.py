"""Host paths handed to a container: only through directories and links that root alone can change.

A CDI spec names host paths that the container runtime resolves, as root, when it creates a
container: a mount's ``hostPath`` (bind-mounted, the MPS pipe directory even read-write) and a
device node's path. The runtime follows every symbolic link on the way, long after numadra wrote
the spec. A path through a directory that others can write lets anyone on the node choose what the
container gets: a link ``/tmp/nvidia-mps -> /etc`` planted in the sticky, world-writable ``/tmp``
before prepare (or swapped in after it) would make the MPS pipe directory a read-write mount of the
host's ``/etc`` in every CUDA container.

:func:`check_host_path_for_container` is the one way a host path gets into a spec numadra writes:
:class:`cdi.spec.CheckedHostPath`, which ``Mount.host_path`` and ``DeviceNode.host_path`` require,
is made here and nowhere else in ``driver/`` (``tests/unit/test_host_paths.py`` scans for it). The
walk goes from ``/`` below the host root, one component at a time, with ``lstat``, and accepts a
path only when nobody but root could change what it resolves to:

* every component, the final object included, is owned by root (or by the user numadra runs as,
  which in a DaemonSet is root too, and otherwise could change numadra itself);
* every directory the walk looks into is not writable by its group or by others, unless it is
  sticky (``/tmp``, ``/dev/shm``): there only an entry's owner (root, by the rule above) or the
  directory's owner can rename or remove the entry;
* a symbolic link is followed only when it is root's and lies in a directory that others cannot
  write at all, sticky or not (no NVIDIA path needs a link in ``/tmp``); absolute targets start
  again at the host's root, or at ``inside`` (a driver container's root), at most 40 links;
* what comes back is the resolved path: no link is left for the runtime to follow.

What this cannot close, and why it is enough: the runtime resolves the path once more at container
create. Between the check and that moment, changing any component of the path, or a link on the
way to it, takes root (the same root that could rewrite the spec itself). A path that fails is
refused with :class:`~driver.errors.UntrustedHostPathError`, naming the component and why; the
callers drop the mount or node with a warning, and the claim goes on without it.

:func:`checked_child` joins one name to a checked directory, for the files numadra itself creates
there (a claim's device metadata, written before the container starts): the directory is checked,
the name is one plain component, and the file is numadra's own.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from cdi.spec import CheckedHostPath
from driver.errors import UntrustedHostPathError

__all__ = ["CheckedDirs", "check_host_path_for_container", "check_host_path_with_stat", "checked_child"]

# ruff: noqa: PTH115, PTH116 - os.lstat/os.readlink one component at a time, on plain strings

#: symbolic links followed while resolving one path (the kernel's limit)
_MAX_LINKS = 40
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


@dataclass(frozen=True, slots=True)
class _Step:
    """One accepted component of the walk: the host path up to it (``/`` for the root) and what
    ``lstat`` said about it. The path is kept, not rebuilt from the names at every component."""

    path: str
    st: os.stat_result


def _trusted_owners() -> frozenset[int]:
    """Root, and the user numadra runs as (root in a DaemonSet)."""
    return frozenset({0, os.geteuid()})


def _join(root: str, host_path: str) -> str:
    """Where numadra sees ``host_path`` below ``root`` (``driver.inventory.hostfiles.host_join``,
    repeated here: the untrusted layer sits below the inventory)."""
    return root.rstrip("/") + host_path


def _child(parent: str, name: str) -> str:
    """The host path of ``name`` in the directory ``parent`` (``/`` for the root)."""
    return f"/{name}" if parent == "/" else f"{parent}/{name}"


class _Walk:
    """One resolution of one path; ``refuse`` names the path asked for in every error."""

    def __init__(self, host_root: str, path: str, seen: list[str] | None = None) -> None:
        self.host_root = host_root
        self.path = path
        self.trusted = _trusted_owners()
        self.links = 0
        #: every host path the walk looks at with ``lstat``, in order (None: not recorded)
        self.seen = seen

    def refuse(self, reason: str, err: int = errno.EPERM) -> UntrustedHostPathError:
        return UntrustedHostPathError(self.path, reason, err)

    def root(self) -> list[_Step]:
        """The walk's first step: the host's ``/`` as numadra sees it (the host root)."""
        try:
            st = os.stat(self.host_root)
        except OSError as exc:
            raise self.refuse(f"host root {self.host_root}: {exc.strerror or exc}", exc.errno or 0) from exc
        if st.st_uid not in self.trusted:
            raise self.refuse(f"/ is owned by uid {st.st_uid}, not root")
        return [_Step("/", st)]

    def resolve(self, stack: list[_Step], host_path: str, floor: int) -> list[_Step]:
        """``stack`` extended by ``host_path``'s components; links never climb below ``floor``."""
        pending = [p for p in host_path.split("/") if p]
        pending.reverse()  # popped from the end: the next component is last
        while pending:
            part = pending.pop()
            if part == ".":
                continue
            if part == "..":
                if len(stack) > floor:
                    stack.pop()
                continue
            parent = stack[-1]
            current = _child(parent.path, part)
            st = self._lstat(current)
            if st.st_uid not in self.trusted:
                raise self.refuse(f"{current} is owned by uid {st.st_uid}, not root")
            open_to_others = parent.st.st_mode & _OTHERS_WRITE
            if open_to_others and not parent.st.st_mode & stat.S_ISVTX:
                mode = stat.S_IMODE(parent.st.st_mode)
                raise self.refuse(f"{parent.path} is writable by others (mode {mode:o}, not sticky)")
            if stat.S_ISLNK(st.st_mode):
                if open_to_others:
                    where = parent.path
                    raise self.refuse(f"{current} is a symbolic link in {where}, which others can write")
                self.links += 1
                if self.links > _MAX_LINKS:
                    raise self.refuse("too many levels of symbolic links", errno.ELOOP)
                target = os.readlink(_join(self.host_root, current))
                if target.startswith("/"):
                    del stack[floor:]
                pending.extend(reversed([p for p in target.split("/") if p]))
                continue
            if pending and not stat.S_ISDIR(st.st_mode):
                raise self.refuse(f"{current} is not a directory", errno.ENOTDIR)
            stack.append(_Step(current, st))
        return stack

    def _lstat(self, current: str) -> os.stat_result:
        if self.seen is not None:
            self.seen.append(current)
        try:
            return os.lstat(_join(self.host_root, current))
        except OSError as exc:
            raise self.refuse(f"{current}: {exc.strerror or exc}", exc.errno or 0) from exc


class CheckedDirs:
    """Directories already checked, reused by the paths of one check (many share a few parents).

    Keep one only as long as the host may not change (one look at a toolkit spec, one discovery).
    """

    def __init__(self) -> None:
        self._stacks: dict[tuple[str, str], tuple[tuple[_Step, ...], int]] = {}

    def parent(self, walk: _Walk, inside: str, parent: str) -> tuple[list[_Step], int]:
        """The accepted steps of ``inside`` + ``parent``, and where ``inside`` ends among them."""
        known = self._stacks.get((inside, parent))
        if known is None:
            top = walk.resolve(walk.root(), inside, 1)
            floor = len(top)
            known = self._stacks[(inside, parent)] = (tuple(walk.resolve(top, parent, floor)), floor)
        return list(known[0]), known[1]


def check_host_path_for_container(
    host_root: str, path: str, *, inside: str = "/", dirs: CheckedDirs | None = None
) -> CheckedHostPath:
    """``path``, a host path, resolved; refused unless only root could change what it resolves to.

    ``host_root`` is where numadra sees the host's ``/``. ``inside`` is a host directory that acts
    as the root of ``path`` (a driver container's root, ``/run/nvidia/driver``): ``path`` is read
    below it and its absolute links start again there, as in that container; the result includes
    it. ``dirs`` reuses the parent directories checked for earlier paths. Raises
    :class:`~driver.errors.UntrustedHostPathError` (an ``OSError``) naming the first component that
    breaks the rule (see the module docstring), or that does not exist.
    """
    return check_host_path_with_stat(host_root, path, inside=inside, dirs=dirs)[0]


def check_host_path_with_stat(
    host_root: str,
    path: str,
    *,
    inside: str = "/",
    dirs: CheckedDirs | None = None,
    seen: list[str] | None = None,
) -> tuple[CheckedHostPath, os.stat_result]:
    """:func:`check_host_path_for_container`, with what the walk's ``lstat`` said about the object
    the path resolves to (for a caller that reads its owner or mode: no second ``stat``).

    ``seen`` gets every host path the walk looked at (for a caller that watches them); with it,
    ``dirs`` is not used: the walk starts at the root."""
    walk = _Walk(host_root, path, seen)
    if not path.startswith("/") or not inside.startswith("/"):
        raise walk.refuse(f"not an absolute host path (inside {inside!r})", errno.EINVAL)
    if dirs is None or seen is not None:
        top = walk.resolve(walk.root(), inside, 1)
        stack = walk.resolve(top, path, len(top))
    else:
        parent, _, name = path.rstrip("/").rpartition("/")
        known, floor = dirs.parent(walk, inside, parent or "/")
        stack = walk.resolve(known, name, floor)
    return CheckedHostPath(stack[-1].path), stack[-1].st


def checked_child(directory: CheckedHostPath, name: str) -> CheckedHostPath:
    """``directory/name``, for a file numadra itself creates in ``directory``, a checked path.

    ``name`` must be one plain component: no ``/``, not ``.`` or ``..``, not empty.
    """
    if not name or "/" in name or name in {".", ".."} or "\0" in name:
        raise UntrustedHostPathError(f"{directory}/{name}", "not one plain file name", errno.EINVAL)
    return CheckedHostPath(f"{directory.rstrip('/')}/{name}")
