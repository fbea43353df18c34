"""One inotify instance, read without blocking: the kernel's word that a watched path changed.

Events are read with ``read(2)`` on the descriptor and parsed by their fixed header (``struct
inotify_event``); a name in an event is only compared by the callers
(:mod:`driver.inventory.dirnames`, :mod:`driver.inventory.nodewatch`), never used as a path.
"""

from __future__ import annotations

import ctypes
import os
import struct
import weakref

__all__ = [
    "IN_ATTRIB",
    "IN_CREATE",
    "IN_DELETE",
    "IN_DELETE_SELF",
    "IN_DONT_FOLLOW",
    "IN_IGNORED",
    "IN_MOVED_FROM",
    "IN_MOVED_TO",
    "IN_MOVE_SELF",
    "IN_ONLYDIR",
    "IN_Q_OVERFLOW",
    "IN_UNMOUNT",
    "Inotify",
]

# <sys/inotify.h>
IN_ATTRIB = 0x4
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
#: wd, mask, cookie, len of ``struct inotify_event``; the name (NUL-padded) follows
_HEADER = struct.Struct("iIII")
_READ_SIZE = 64 * 1024


class Inotify:
    """One inotify instance, non-blocking; closed by :meth:`close` or when collected.

    Raises OSError (or AttributeError without the libc symbols) when inotify is unavailable.
    """

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._add_watch = libc.inotify_add_watch
        self._add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        self.fd = fd
        self._closer = weakref.finalize(self, os.close, fd)

    def watch(self, path: str, mask: int) -> int:
        """The watch descriptor of ``path`` for the events of ``mask`` (OSError when it cannot be
        watched)."""
        wd = int(self._add_watch(self.fd, os.fsencode(path), mask))
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return wd

    def events(self) -> list[tuple[int, int, str]]:
        """Every event queued now: (wd, mask, name), ``name`` empty for the watched object's own."""
        out: list[tuple[int, int, str]] = []
        while True:
            try:
                data = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return out
            offset = 0
            while offset + _HEADER.size <= len(data):
                wd, mask, _, size = _HEADER.unpack_from(data, offset)
                start = offset + _HEADER.size
                name = os.fsdecode(data[start : start + size].split(b"\0", 1)[0])
                out.append((wd, mask, name))
                offset = start + size

    def close(self) -> None:
        """Close the descriptor (again is a no-op)."""
        self._closer()
