"""Atomic file writes and removal for spec files (also used for the journal and metadata files).

A runtime may read a spec directory at any moment, and a crash may strike between any two syscalls:
write to a temp file in the same directory, fsync it, rename it over the target, fsync the
directory. Readers then see the old file or the new one, never a torn one, and the rename survives
power loss.

Symbolic links: the directories numadra writes into (the CDI dir, the plugin dir) hold files and
directories only numadra makes, and anyone who can plant a link there (a hostile container with a
hostPath, a careless operator) could otherwise make a root process write where the link points.
So a write given ``roots`` walks from the root it lies under to the target's directory one
component at a time with ``O_NOFOLLOW | O_DIRECTORY`` directory descriptors (``openat``), creates
the temp file with ``O_EXCL | O_NOFOLLOW`` and renames it relative to that descriptor: a link
anywhere below the root is :class:`SymlinkError` naming it, and nothing is written through it. The
root itself is the operator's flag (``/var/run/cdi`` lives under the ``/var/run -> /run`` link on
most hosts) and is followed. Modes are set with ``fchmod`` on the descriptor, so the umask never
decides them (files 0644 or 0600, directories 0755 or 0700).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import stat
import threading
import weakref
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from cdi.spec import Spec, validate_spec

__all__ = [
    "DirsUnder",
    "SymlinkError",
    "atomic_write_bytes",
    "ensure_dir",
    "fsync_dir",
    "remove_file",
    "spec_bytes",
    "spec_json_bytes",
    "spec_text",
    "write_all",
    "write_spec",
]

_counter = itertools.count()
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SymlinkError(OSError):
    """A path numadra writes to (or one of its directories) is a symbolic link: never followed.

    An ``OSError`` (errno ``ELOOP``, ``filename`` the link), so every caller that reports a failed
    write per claim reports this one too: "cannot write <path>: ... symbolic link ...".
    """

    def __init__(self, path: str) -> None:
        super().__init__(
            errno.ELOOP, "is a symbolic link, which numadra never makes: refusing to follow it", path
        )

    def __str__(self) -> str:
        return f"{self.filename} {self.strerror}"


def _root_of(path: str, roots: Sequence[str]) -> str | None:
    """The root (no trailing slash) that ``path`` lies strictly below, if any."""
    for root in roots:
        base = root.rstrip("/")
        if path.startswith(base + "/") and len(path) > len(base) + 1:
            return base
    return None


def _open_dir_under(root: str, rel_dir: str, *, create: int | None) -> int:
    """A descriptor of ``root/rel_dir``, walked without following links below ``root``.

    ``create``: make missing components with this mode (set exactly, whatever the umask).
    Raises :class:`SymlinkError` naming the first link met, OSError as the syscalls raise it.
    """
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if create is None:
            raise
        os.makedirs(root, create, exist_ok=True)  # the operator's directory, made on first use
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    where = root
    try:
        for part in rel_dir.split("/") if rel_dir else ():
            if part in ("", "."):
                continue
            where = f"{where}/{part}"
            if part == "..":
                raise OSError(errno.EINVAL, "'..' in a path numadra writes", where)
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if create is None:
                    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), where) from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, create, dir_fd=fd)
                nxt = _open_child_dir(fd, part, where)
                os.fchmod(nxt, create)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, part):
                    raise SymlinkError(where) from None
                exc.filename = where
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_child_dir(fd: int, part: str, where: str) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, part):
            raise SymlinkError(where) from None
        raise


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def ensure_dir(path: str | os.PathLike[str], mode: int = 0o755) -> None:
    """Make ``path`` (and missing parents, with ``mode`` too) unless it is a directory already.

    A symbolic link at ``path`` is :class:`SymlinkError`; a directory made here gets exactly
    ``mode``. Existing directories are left as they are.
    """
    target = os.fspath(path)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        parent = os.path.dirname(target)
        if parent and parent != target:
            ensure_dir(parent, mode)
        with contextlib.suppress(FileExistsError):
            os.mkdir(target, mode)
        st = os.lstat(target)
        if stat.S_ISDIR(st.st_mode):
            fd = os.open(target, _DIR_FLAGS)
            try:
                if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
    if stat.S_ISLNK(st.st_mode):
        raise SymlinkError(target)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), target)


def fsync_dir(directory: Path) -> None:
    """Flush a directory entry change (rename, unlink) to disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Pid:
    """This process's ID, asked of the kernel once and again only in a forked child."""

    value = os.getpid()

    @classmethod
    def refresh(cls) -> None:
        cls.value = os.getpid()


os.register_at_fork(after_in_child=_Pid.refresh)


def _temp_name(path: str) -> str:
    """A temp name unique per process, thread and call, hidden and not matching ``*.json``."""
    head, sep, name = path.rpartition("/")
    return f"{head}{sep}.{name}.{_Pid.value}.{threading.get_ident()}.{next(_counter)}.tmp"


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``: ``os.write`` may write less (a signal, a full disk on the way)."""
    written = os.write(fd, data)  # one call for every file this driver writes
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def atomic_write_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    mode: int = 0o644,
    *,
    sync: bool = True,
    roots: Sequence[str] = (),
    dir_mode: int | None = None,
) -> None:
    """Replace ``path`` with ``data`` atomically; the temp file lives in the same directory.

    ``sync=False`` skips both fsyncs: for files that can be re-created from a durable record (the
    journal) or that live on tmpfs (``/var/run``), where fsync costs time and buys nothing.
    The file gets exactly ``mode`` whatever the umask.

    ``roots``: when ``path`` lies below one of them, no symbolic link below that root is followed
    (see the module docstring) and ``dir_mode`` (when given) makes missing directories on the way.
    Without a root, only the target's own directory entry is protected (the rename replaces a link
    at ``path``, it never writes through it). Every OSError names the file it is about (``ENOSPC``
    from ``write`` comes without a name otherwise).
    """
    # plain strings, not pathlib: this runs for every file of every prepare (hot path)
    target = os.fspath(path)
    root = _root_of(target, roots) if roots else None
    if root is None:
        _write_at(None, target, target, data, mode, sync=sync)
        return
    rel_dir, _, name = target[len(root) + 1 :].rpartition("/")
    dfd = _open_dir_under(root, rel_dir, create=dir_mode)
    try:
        _write_at(dfd, name, target, data, mode, sync=sync)
    finally:
        os.close(dfd)


def _write_at(dfd: int | None, name: str, target: str, data: bytes, mode: int, *, sync: bool) -> None:
    """The temp-write-rename of :func:`atomic_write_bytes`, relative to ``dfd`` when given."""
    tmp = _temp_name(name)
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, mode, dir_fd=dfd
        )
    except OSError as exc:
        exc.filename = target
        raise
    try:
        try:
            os.fchmod(fd, mode)
            write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        if isinstance(exc, OSError):
            exc.filename = target  # the file the caller asked for, not our temp name
            exc.filename2 = None
        raise
    if sync:
        if dfd is not None:
            os.fsync(dfd)
        else:
            fsync_dir(Path(os.path.dirname(target) or "."))


def spec_bytes(spec: Spec) -> bytes:
    """The exact bytes written for ``spec`` (validated; stable key order, so equal specs compare equal).

    The same bytes as ``spec_json_bytes(spec.to_json())``, encoded straight from the model.
    """
    return spec_text(spec).encode()


def spec_text(spec: Spec) -> str:
    """:func:`spec_bytes` as text (validated), for a caller that keeps the text."""
    validate_spec(spec)
    return spec.json_text() + "\n"


def spec_json_bytes(obj: dict[str, Any]) -> bytes:
    """Serialise an already rendered spec object the way :func:`spec_bytes` does."""
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def write_spec(directory: Path, file_name: str, spec: Spec, *, sync: bool = True) -> Path:
    """Validate ``spec`` and write it atomically as ``directory/file_name``; returns the path."""
    if "/" in file_name or not file_name.endswith((".json", ".yaml")):
        raise ValueError(f"invalid CDI spec file name {file_name!r}")
    path = directory / file_name
    atomic_write_bytes(path, spec_bytes(spec), sync=sync)
    return path


def _parent_under(target: str, roots: Sequence[str]) -> tuple[int | None, str]:
    """(descriptor of the target's directory walked without links, name) below a root; else
    (None, target). FileNotFoundError when a directory on the way is missing."""
    root = _root_of(target, roots) if roots else None
    if root is None:
        return None, target
    rel_dir, _, name = target[len(root) + 1 :].rpartition("/")
    return _open_dir_under(root, rel_dir, create=None), name


def remove_file(path: str | os.PathLike[str], *, sync: bool = False, roots: Sequence[str] = ()) -> bool:
    """Remove ``path``; a missing file is a no-op. Returns True when a file was removed.

    With ``roots``: no symbolic link below the root is followed on the way (SymlinkError), so a
    link planted as a claim's directory never makes numadra delete a file where it points.
    """
    target = os.fspath(path)
    try:
        dfd, name = _parent_under(target, roots)
    except FileNotFoundError:
        return False
    try:
        removed = _unlink_at(dfd, name, target)
    finally:
        if dfd is not None:
            if sync:
                os.fsync(dfd)
            os.close(dfd)
    if removed and sync and dfd is None:
        fsync_dir(Path(os.path.dirname(target) or "."))
    return removed


def _unlink_at(dfd: int | None, name: str, target: str) -> bool:
    """Unlink ``name`` (relative to ``dfd`` when given): False when it was not there; an error
    names ``target``, the path the caller asked about."""
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        return False
    except OSError as exc:
        exc.filename = target
        raise
    return True


class _Anchor:
    """One directory below a root, held open between uses (see :class:`DirsUnder`)."""

    __slots__ = ("checked", "fd", "ident")

    def __init__(self) -> None:
        self.fd = -1
        self.ident = (0, 0)
        self.checked = -1  # the call (DirsUnder.call) in which fd was last checked against path


def _close_anchors(held: dict[str, _Anchor]) -> None:
    for anchor in held.values():
        if anchor.fd >= 0:
            os.close(anchor.fd)
            anchor.fd = -1
    held.clear()


class _Call(AbstractContextManager[None]):
    """The context of :meth:`DirsUnder.call` (a class: a generator-based one costs more to enter)."""

    __slots__ = ("_dirs",)

    def __init__(self, dirs: DirsUnder) -> None:
        self._dirs = dirs

    def __enter__(self) -> None:
        self._dirs._calls += 1
        self._dirs._in_call = True

    def __exit__(self, *_: object) -> None:
        self._dirs._in_call = False


class DirsUnder:
    """Writes and removals below ``roots`` through directory descriptors kept open between calls.

    :func:`atomic_write_bytes` and :func:`remove_file` with ``roots`` walk from the root to the
    target's directory on every call, two syscalls a component. A caller that writes into the same
    few directories on every call (the claims driver: the CDI dir and the metadata dir) keeps each
    directory's descriptor here instead, walked the same way (no link below the root followed)
    the first time, and before each later use checks with one ``lstat`` that the path still
    names that directory: a directory removed, replaced or swapped for a link since is walked
    again, so a link planted later is still :class:`SymlinkError`, exactly as a fresh walk finds
    it. Missing directories are made with ``dir_mode``. A path below no root is written as
    :func:`atomic_write_bytes` writes one without roots.

    Inside :meth:`call` a directory is checked once, at its first use in that call: a call (one
    kubelet request) writes or removes several files of one directory in a row, and a swap
    between two of them is the same race as one between the check and the write.

    Not thread safe: the caller serialises its calls (the claims driver holds its own lock).
    At most ``max_dirs`` descriptors are kept; more directories close the oldest.
    """

    def __init__(self, roots: Sequence[str], *, dir_mode: int = 0o755, max_dirs: int = 16) -> None:
        self._roots = tuple(roots)
        self._dir_mode = dir_mode
        self._max = max_dirs
        self._held: dict[str, _Anchor] = {}
        # dropped without close() (an owner that is simply let go): the descriptors go with it
        weakref.finalize(self, _close_anchors, self._held)
        self._calls = 0  # calls begun so far
        self._in_call = False

    def call(self) -> AbstractContextManager[None]:
        """One caller's call: each directory is checked at its first use within it only."""
        return _Call(self)

    def write(self, path: str, data: bytes, mode: int) -> None:
        """Replace ``path`` with ``data`` atomically, unsynced (see :func:`atomic_write_bytes`)."""
        found = self._dir_of(path, create=True)
        if found is None:
            _write_at(None, path, path, data, mode, sync=False)
            return
        fd, name = found
        _write_at(fd, name, path, data, mode, sync=False)

    def remove(self, path: str) -> bool:
        """Remove ``path`` as :func:`remove_file` does (unsynced); True when a file was removed."""
        try:
            found = self._dir_of(path, create=False)
        except FileNotFoundError:
            return False
        fd, name = found if found is not None else (None, path)
        return _unlink_at(fd, name, path)

    def close(self) -> None:
        """Close every held descriptor (the next use walks again)."""
        _close_anchors(self._held)

    def _dir_of(self, path: str, *, create: bool) -> tuple[int, str] | None:
        """(descriptor of the path's directory, file name) below a root, else None."""
        head, _, name = path.rpartition("/")
        anchor = self._held.get(head)
        if anchor is not None and name and anchor.fd >= 0 and self._in_call and anchor.checked == self._calls:
            # checked in this call already; a held directory lies below a root (it was walked
            # from one), and so does every file name in it
            return anchor.fd, name
        root = _root_of(path, self._roots)
        if root is None:
            return None
        if anchor is None:
            if len(self._held) >= self._max:
                oldest = next(iter(self._held))
                _close_anchors({oldest: self._held.pop(oldest)})
            anchor = self._held[head] = _Anchor()
        if anchor.fd >= 0:
            try:  # the root itself is followed (the operator's flag), what lies below it never is
                st = os.stat(head) if head == root else os.lstat(head)
            except FileNotFoundError:
                st = None
            if st is not None and (st.st_dev, st.st_ino) == anchor.ident and stat.S_ISDIR(st.st_mode):
                anchor.checked = self._calls
                return anchor.fd, name
            os.close(anchor.fd)
            anchor.fd = -1
        fd = _open_dir_under(root, head[len(root) + 1 :], create=self._dir_mode if create else None)
        st = os.fstat(fd)
        anchor.fd, anchor.ident, anchor.checked = fd, (st.st_dev, st.st_ino), self._calls
        return fd, name
