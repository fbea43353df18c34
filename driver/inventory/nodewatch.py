"""Device nodes checked for containers, checked again only when the kernel says the host changed.

Every prepare of a GPU or NIC claim checks each of its device nodes
(:func:`~driver.untrusted.hostpaths.check_host_path_for_container`: an ``lstat`` walk from the host's
``/``) and reads the group that opens it (:func:`~driver.inventory.nodeaccess.access_gid`). These are
facts of the host that change rarely, and a planted link or a ``chown`` must be seen by the next
prepare. :class:`WatchedNodes` keeps each accepted node's result and forgets every result on any
sign that something a walk looked at may have changed:

* an inotify watch on the host root and on every object a walk looked at (each directory, each
  link, the node itself; ``IN_DONT_FOLLOW``, so the object the walk saw is the one watched) reports
  ``IN_ATTRIB`` (owner, group, mode; of a directory's entries too), ``IN_CREATE``, ``IN_DELETE``,
  ``IN_MOVED_FROM``/``IN_MOVED_TO`` (an entry replaced or renamed), ``IN_DELETE_SELF``,
  ``IN_MOVE_SELF``, ``IN_UNMOUNT``, a dropped watch or a queue overflow: any event at all drops
  every result and the instance (a fresh one is made at the next walk, so watches never pile up);
* a mount or unmount in numadra's mount namespace (``/proc/self/mountinfo`` polled for
  ``POLLPRI``), which no inotify watch reports;
* the host root's own ``stat`` (device, inode, owner, mode), taken on every call as the walk takes it.

So a call that finds nothing changed costs one ``poll(2)`` (the inotify descriptor and the mount
table's together) and one ``stat``, where a walk costs an ``lstat`` per component.

A result is kept only when the watches were in place before the walk that made it: the node is
walked once, every object it looked at is watched, and it is walked again; that second walk's
result is kept only if it looked at nothing unwatched. A refused node is never kept (it is walked,
and logged by the caller, on every prepare). Where inotify or the mount table cannot be watched,
every call walks, as without this cache. What inotify cannot see is a change made on another
machine to a network filesystem the path crosses; device nodes live on the host's own ``/dev``,
and such a change takes root on that filesystem's server, as a mount does here.
"""

from __future__ import annotations

import os
import select
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path

from cdi.spec import CheckedHostPath
from driver.errors import UntrustedHostPathError
from driver.inventory.inotify import (
    IN_ATTRIB,
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_DONT_FOLLOW,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    Inotify,
)
from driver.inventory.nodeaccess import access_gid, access_gid_of
from driver.log import get_logger
from driver.untrusted.files import open_regular
from driver.untrusted.hostpaths import CheckedDirs, check_host_path_with_stat

__all__ = ["WatchedNodes"]

# ruff: noqa: PTH116 - os.stat on plain strings, as the inventory's readers do

_log = get_logger("inventory.nodewatch")
_MASK = (
    IN_ATTRIB
    | IN_CREATE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_DONT_FOLLOW
)
_MOUNTS = Path("/proc/self/mountinfo")  # polled, never read


def _root_identity(host_root: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(host_root)  # as the walk's first step: following links
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_uid, st.st_mode


class WatchedNodes:
    """Checked device nodes below ``host_root`` and their groups (module docstring). Thread-safe."""

    def __init__(self, host_root: str) -> None:
        self.host_root = host_root
        self._lock = threading.Lock()
        self._inotify: Inotify | None = None
        self._watched: set[str] = set()
        self._kept: dict[str, tuple[CheckedHostPath, int | None]] = {}
        self._root: tuple[int, int, int, int] | None = None
        #: the mount table's descriptor (POLLPRI) and the inotify instance's (POLLIN): one poll
        #: per call says whether either has news
        self._mounts: select.poll | None = None
        self._mounts_file: weakref.finalize[[int], WatchedNodes] | None = None  # closes the polled descriptor
        self._unavailable = False
        #: walks done (two per node newly kept): what a test reads to see a walk was spared
        self.walks = 0

    def check(
        self, paths: Sequence[str], dirs: CheckedDirs | None = None
    ) -> list[tuple[CheckedHostPath, int | None] | UntrustedHostPathError]:
        """Each of ``paths`` checked for containers with the group that opens it (None: none, or
        not a node :func:`access_gid` gives one for), or the check's refusal. ``dirs``: the
        directories checked for a call's earlier paths, for a walk that keeps nothing (no inotify)."""
        out: list[tuple[CheckedHostPath, int | None] | UntrustedHostPathError] = []
        with self._lock:
            self._forget_if_changed()
            for path in paths:
                kept = self._kept.get(path)
                if kept is not None:
                    out.append(kept)
                    continue
                try:
                    out.append(self._walk_and_keep(path, dirs))
                except UntrustedHostPathError as exc:
                    out.append(exc)
        return out

    def close(self) -> None:
        """Release the descriptors; later calls walk every time."""
        with self._lock:
            self._drop()
            if self._mounts_file is not None:
                self._mounts_file()
            self._mounts, self._mounts_file, self._unavailable = None, None, True

    def _walk(
        self, path: str, seen: list[str] | None, dirs: CheckedDirs | None = None
    ) -> tuple[CheckedHostPath, int | None]:
        self.walks += 1
        checked, st = check_host_path_with_stat(self.host_root, path, seen=seen, dirs=dirs)
        # the walk's lstat of the node is access_gid's own when it followed no link
        gid = access_gid_of(st) if checked == path else access_gid(self.host_root, path)
        return checked, gid

    def _walk_and_keep(self, path: str, dirs: CheckedDirs | None) -> tuple[CheckedHostPath, int | None]:
        inotify = self._instance()
        if inotify is None:
            return self._walk(path, None, dirs)
        first: list[str] = []
        self._walk(path, first)  # a refusal propagates: nothing is kept
        try:
            for host_path in first:
                if host_path not in self._watched:
                    inotify.watch(self.host_root.rstrip("/") + host_path, _MASK)
                    self._watched.add(host_path)
        except OSError as exc:
            _log.debug("device node not watched", path=path, reason=str(exc))
            return self._walk(path, None)
        second: list[str] = []
        result = self._walk(path, second)
        if self._watched.issuperset(second):
            self._kept[path] = result
        return result

    def _instance(self) -> Inotify | None:
        if self._unavailable:
            return None
        if self._mounts is None:
            try:
                fd, _ = open_regular(_MOUNTS, follow_symlinks=True)  # /proc/self is a link
            except OSError as exc:
                self._unavailable = True
                _log.info("device nodes checked on every prepare", reason=str(exc))
                return None
            poller = select.poll()
            poller.register(fd, select.POLLPRI | select.POLLERR)
            self._mounts, self._mounts_file = poller, weakref.finalize(self, os.close, fd)
        if self._inotify is None:
            try:
                inotify = Inotify()
            except (OSError, AttributeError) as exc:
                self._unavailable = True
                _log.info("device nodes checked on every prepare", reason=str(exc))
                return None
            try:
                inotify.watch(self.host_root, _MASK & ~IN_DONT_FOLLOW)  # as the walk stats it
            except OSError:
                inotify.close()
                return None  # no host root (yet): walked this time, tried again next time
            self._mounts.register(inotify.fd, select.POLLIN)
            self._inotify, self._root = inotify, _root_identity(self.host_root)
        return self._inotify

    def _forget_if_changed(self) -> None:
        """Drop every kept result (and the watches) when anything watched may have changed."""
        if self._inotify is None or self._mounts is None:
            return
        # an inotify event queued, or the mount table changed (poll reports each change once);
        # the instance's queue goes with it
        if self._mounts.poll(0) or _root_identity(self.host_root) != self._root:
            self._drop()

    def _drop(self) -> None:
        if self._inotify is not None:
            if self._mounts is not None:
                self._mounts.unregister(self._inotify.fd)
            self._inotify.close()
        self._inotify, self._root = None, None
        self._watched.clear()
        self._kept.clear()
