"""Files of the host that another program wrote: read safely, and their paths resolved in a root.

The NVIDIA user-space discovery reads files that numadra does not own: the driver's version files,
the driver root's libraries and binaries, and the CDI specs other programs leave in the shared CDI
dirs. A file there may be a symbolic link planted to make numadra read something else, a FIFO that
blocks the reader forever, or a huge file. :func:`read_host_file` reads them through the driver's one
reader: the last component is never followed, the open does not block, only regular files are
read, and never more than a cap.

Paths in a CDI spec and in the driver's own symlinks are *host* paths; numadra sees the host under
``--host-root``. :func:`resolve_in_root` follows a host path's symbolic links the way the host
would (an absolute target starts again at the host's root), without ever leaving the root, so a
check of "does the mount source exist" looks at the file the runtime will mount.
"""

from __future__ import annotations

import os
import stat

from driver.untrusted.files import read_file

__all__ = ["host_join", "read_host_file", "resolve_in_root"]

# ruff: noqa: PTH115 - os.readlink on plain strings, one component at a time

#: symbolic links followed while resolving one path (the kernel's limit)
_MAX_LINKS = 40


def read_host_file(path: str, *, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    The one reader of the driver (:func:`driver.untrusted.files.read_file`): a link, FIFO, socket,
    device, directory or a file over ``limit`` raises
    :class:`~driver.errors.UntrustedFileError` (an ``OSError``) naming the path.
    """
    return read_file(path, max_bytes=limit)


def host_join(root: str, host_path: str) -> str:
    """Where numadra sees the host path ``host_path`` when the host is mounted at ``root``."""
    base = root.rstrip("/")
    return base + host_path if host_path.startswith("/") else f"{base}/{host_path}"


def resolve_in_root(root: str, host_path: str, dirs: dict[str, str] | None = None) -> str:
    """``host_path`` with every symbolic link resolved as on the host, confined to ``root``.

    Returns the resolved host path (absolute, without ``root``). ``..`` never climbs above the
    host's ``/``. Raises OSError when a component is missing (``ENOENT``), when a component that
    has more after it is not a directory or a link (``ENOTDIR``), or after too many links
    (``ELOOP``). ``dirs`` caches resolved parent directories across calls of one check (many
    paths share a few directories); the caller keeps it only as long as the host may not change.
    """
    if not host_path.startswith("/"):
        raise OSError(22, "not an absolute host path", host_path)
    if dirs is not None:
        parent, _, name = host_path.rstrip("/").rpartition("/")
        known = dirs.get(parent)
        if known is None:
            known = dirs[parent] = resolve_in_root(root, parent or "/")
        return _walk(root, [p for p in known.split("/") if p], [name], host_path)
    pending = [p for p in host_path.split("/") if p]
    pending.reverse()  # popped from the end: the next component is last
    return _walk(root, [], pending, host_path)


def _walk(root: str, resolved: list[str], pending: list[str], host_path: str) -> str:
    """Resolve the ``pending`` components (next one last) below the resolved ``resolved`` ones."""
    links = 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        current = "/" + "/".join([*resolved, part])
        st = os.lstat(host_join(root, current))
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                raise OSError(40, "too many levels of symbolic links", host_path)
            target = os.readlink(host_join(root, current))
            if target.startswith("/"):
                resolved = []
            pending.extend(reversed([p for p in target.split("/") if p]))
            continue
        if pending and not stat.S_ISDIR(st.st_mode):
            raise OSError(20, "not a directory", current)
        resolved.append(part)
    return "/" + "/".join(resolved)
