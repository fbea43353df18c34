"""The names of a few directories, listed again only when the kernel says a name came or went.

The CDI dir numadra writes into holds one spec file per prepared claim, and the NVIDIA toolkit's
spec sits among them (``/var/run/cdi/nvidia.yaml``). Looking for the toolkit's spec ahead of every
prepare on a GPU node listed the whole dir: every prepared claim's name read, filtered and sorted
per call, a cost that grows with the node's claims (bench/fill.py measures it; bench/README.md has
the figures). :class:`DirNames` keeps each dir's kept names and lists
the dir again only when inotify reports that a name the caller keeps was created, deleted or
moved in or out. Events about names the caller does not keep (numadra's own spec files, dot-named
temp files) cost a read of the event queue, never a listing.

Nothing is missed for the sake of speed: the watch is set before the dir is listed, so a name
added after the listing is an event; a queue overflow, a watch the kernel dropped (the dir was
removed or moved, its filesystem unmounted) and a path that now leads to another directory (a
``stat`` per call compares the device and inode) each list again. A dir that cannot be watched
(it does not exist yet; inotify is unavailable or its per-user instances are used up) is listed
on every call, and the watch is tried again on the next. A changed file keeps its
name: its new version is the caller's to notice (the toolkit finder's ``lstat`` per kept file).

The kernel's events are read with ``read(2)`` on the inotify descriptor, parsed by their fixed
header (``struct inotify_event``); a name in an event is only compared with the caller's filter.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from driver.inventory.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    IN_UNMOUNT,
    Inotify,
)
from driver.log import get_logger

__all__ = ["DirNames"]

_log = get_logger("inventory.dirnames")

_WATCHED = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
_NAME_EVENTS = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
_WATCH_GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED


@dataclass(slots=True)
class _Dir:
    path: str
    wd: int | None = None  # None: not watched, listed every call
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) the watch was set on
    names: list[str] | None = None  # the kept names as last listed; None: list again


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)  # noqa: PTH116 - follows links as the listing does
    except OSError:
        return None
    return st.st_dev, st.st_ino


class DirNames:
    """The kept names of ``directories`` (module docstring). Thread-safe.

    ``keep(name)`` says which names the caller wants; only events about those list a dir again.
    """

    def __init__(self, directories: Sequence[str], keep: Callable[[str], bool]) -> None:
        self._keep = keep
        self._dirs = {d: _Dir(d) for d in directories}
        self._lock = threading.Lock()
        self._inotify: Inotify | None = None
        self._unavailable = False
        #: listings done (each dir counted): what a test reads to see a listing was spared
        self.listings = 0

    def names(self, directory: str) -> list[str]:
        """The kept names in ``directory`` (one given at construction), sorted; [] when unreadable."""
        with self._lock:
            self._drain()
            entry = self._dirs[directory]
            if entry.wd is not None and entry.identity != _identity(directory):
                entry.wd, entry.names = None, None  # the path leads elsewhere now: watch it anew
            if entry.wd is None:
                self._watch(entry)
            if entry.names is None or entry.wd is None:
                listed = self._list(directory)
                entry.names = listed if entry.wd is not None else None
                return listed
            return list(entry.names)

    def close(self) -> None:
        """Release the inotify descriptor; later calls list every time."""
        with self._lock:
            if self._inotify is not None:
                self._inotify.close()
            self._inotify, self._unavailable = None, True
            for entry in self._dirs.values():
                entry.wd, entry.names = None, None

    def _instance(self) -> Inotify | None:
        if self._inotify is None and not self._unavailable:
            try:
                self._inotify = Inotify()
            except (OSError, AttributeError) as exc:  # no inotify (or no libc symbol): list every time
                self._unavailable = True
                _log.info("CDI dirs listed on every look", reason=str(exc))
        return self._inotify

    def _watch(self, entry: _Dir) -> None:
        inotify = self._instance()
        if inotify is None:
            return
        identity = _identity(entry.path)  # before the watch: a swap in between is seen next call
        try:
            wd = inotify.watch(entry.path, _WATCHED)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                _log.debug("CDI dir not watched", path=entry.path, reason=str(exc))
            return
        for other in self._dirs.values():  # two paths of one dir share the kernel's watch
            if other is not entry and other.wd == wd:
                other.names = None
        entry.wd, entry.identity, entry.names = wd, identity, None

    def _drain(self) -> None:
        """Mark the dirs whose kept names changed, from every event queued since the last call."""
        inotify = self._inotify
        if inotify is None:
            return
        for wd, mask, name in inotify.events():
            if mask & IN_Q_OVERFLOW:  # events were lost: every dir is listed again
                for entry in self._dirs.values():
                    entry.names = None
                continue
            for entry in self._dirs.values():
                if entry.wd != wd:
                    continue
                if mask & _WATCH_GONE:
                    entry.wd, entry.names = None, None
                elif mask & _NAME_EVENTS and self._keep(name):
                    entry.names = None

    def _list(self, directory: str) -> list[str]:
        self.listings += 1
        try:
            with os.scandir(directory) as it:
                return sorted(e.name for e in it if self._keep(e.name))
        except OSError:
            return []
