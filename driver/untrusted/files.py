"""The one way numadra opens a file to read it, and the one way it opens a lock file.

Most files numadra reads lie in directories that others can write: the CDI dir (every CDI
producer of the node), the plugin dir and its state (a hostPath, so anyone with a hostPath or a
shell on the node), the health-clear requests (the operator), an OCI bundle, the host's sysfs and
procfs. A plain ``open()`` there trusts what it finds: a FIFO blocks the open until a writer comes
(before the kubelet registration, or under the claims lock, with nothing logged), a link makes a
root process read the file it points to, and a sparse file of a terabyte is read into memory. So
every read goes through :func:`read_file` (or :func:`open_regular`, for a reader that keeps the
descriptor), which opens

* with ``O_NOFOLLOW``: a symbolic link as the last component is refused, never followed (unless
  the caller says the links there are the owner's own, ``follow_symlinks=True``: the service
  account's projected volume links ``token`` to ``..data/token``; a path a user typed);
* with ``O_NONBLOCK``: opening a FIFO returns at once instead of waiting for a writer (and a unix
  socket cannot be opened at all);
* then checks the *descriptor* with ``fstat``: a regular file only (sysfs and procfs attributes
  are regular files; a FIFO, socket, device or directory is refused), and the file that was
  opened, not a path checked before and swapped after;
* and reads at most the caller's cap: a larger ``st_size`` is refused before any byte is read,
  and reading stops one byte past the cap (sysfs reports 4096 and procfs 0 whatever they hold).

A refusal is :class:`~driver.errors.UntrustedFileError` naming the path and the reason; a file
that is not there stays ``FileNotFoundError``, and other failures stay the ``OSError`` the
kernel gave, so callers keep telling "absent" from "odd". Lock files (``flock`` targets shared
with another process) are opened by :func:`open_lock_file` under the same rules: a link, FIFO,
socket or directory at a lock's path is refused loudly instead of being locked through, or
silently not locked.

Raw descriptors and ``os`` calls on purpose: discovery reads hundreds of sysfs files per scan.
"""

from __future__ import annotations

import errno
import os
import stat

from driver.errors import UntrustedFileError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_USER_FILE_BYTES",
    "open_lock_file",
    "open_regular",
    "read_file",
    "read_file_text",
    "read_from",
]

#: the cap when a caller names none: larger than any one file numadra writes or reads per claim
DEFAULT_MAX_BYTES = 1 << 20
#: a file a user names on the command line (a claim, ``kubectl get resourceslices -o yaml``)
MAX_USER_FILE_BYTES = 64 << 20
#: how much one ``read()`` asks for when the size is unknown (procfs says 0)
_CHUNK = 1 << 16
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_READ_NOFOLLOW = _READ_FLAGS | os.O_NOFOLLOW
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Path = str | os.PathLike[str]


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a unix socket"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symbolic link"),
)


def _kind(mode: int) -> str:
    """What a non-regular file is, for the refusal's text."""
    return next((name for test, name in _KINDS if test(mode)), f"of type {stat.S_IFMT(mode):o}")


def _open_failed(path: str, exc: OSError, *, follow_symlinks: bool) -> OSError:
    """The error for a failed ``open``: ours when the path holds something numadra refuses."""
    if exc.errno == errno.ELOOP and not follow_symlinks:
        return UntrustedFileError(path, "is a symbolic link, which numadra does not follow", errno.ELOOP)
    if exc.errno == errno.ENXIO:  # a unix socket (or a device without a driver) cannot be opened
        return UntrustedFileError(path, "is a unix socket or a device, not a regular file", errno.ENXIO)
    if exc.errno == errno.EISDIR:
        return UntrustedFileError(path, "is a directory, not a regular file", errno.EISDIR)
    if exc.filename is None:
        exc.filename = path
    return exc


def _check_regular(fd: int, path: str) -> os.stat_result:
    """The descriptor's status; closes it and refuses when it is not a regular file."""
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UntrustedFileError(path, f"is {_kind(st.st_mode)}, not a regular file")
    return st


def open_regular(
    path: Path, *, dir_fd: int | None = None, follow_symlinks: bool = False
) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file at ``path`` and its status; the caller closes it.

    For a reader that keeps the descriptor (the journal reads only what was appended since); the
    others call :func:`read_file`. Refusals: see the module docstring.
    """
    name = os.fspath(path)
    flags = _READ_FLAGS if follow_symlinks else _READ_NOFOLLOW
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        raise _open_failed(name, exc, follow_symlinks=follow_symlinks) from None
    return fd, _check_regular(fd, name)


def read_from(fd: int, st: os.stat_result, path: Path, max_bytes: int) -> bytes:
    """The bytes of an open regular file (from its current offset), at most ``max_bytes``."""
    if st.st_size > max_bytes:
        raise UntrustedFileError(
            os.fspath(path), f"is {st.st_size} bytes, more than the {max_bytes} allowed", errno.EFBIG
        )
    size = st.st_size
    chunks: list[bytes] = []
    total = 0
    while True:
        # ask for what the size promises (+1 to see the end), or a chunk when it promises nothing
        want = min(size - total + 1 if size > total else _CHUNK, max_bytes + 1 - total)
        chunk = os.read(fd, want)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise UntrustedFileError(
                os.fspath(path), f"holds more than the {max_bytes} bytes allowed", errno.EFBIG
            )
        # the end: nothing more, or less than asked of a file with a size (a disk file reads to
        # its size; a sysfs attribute, which says 4096, comes whole in one read). procfs says 0
        # and may come a page at a time: read on until nothing comes.
        if not chunk or (size and (len(chunk) < want or total == size)):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_file(
    path: Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    dir_fd: int | None = None,
    follow_symlinks: bool = False,
) -> bytes:
    """The content of the regular file at ``path``, at most ``max_bytes`` (see the module docstring).

    Raises :class:`~driver.errors.UntrustedFileError` when the path holds a link, a FIFO, a socket,
    a device or a directory, or more than ``max_bytes``; ``FileNotFoundError`` when nothing is
    there; any other ``OSError`` as the kernel gave it (the path in ``filename``).
    """
    name = path if isinstance(path, str) else os.fspath(path)
    flags = _READ_FLAGS if follow_symlinks else _READ_NOFOLLOW
    try:  # open_regular and read_from, inline: discovery calls this for every sysfs attribute
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise  # the common miss (an optional attribute), as cheap as it can be
    except OSError as exc:
        raise _open_failed(name, exc, follow_symlinks=follow_symlinks) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFileError(name, f"is {_kind(st.st_mode)}, not a regular file")
        return read_from(fd, st, name, max_bytes)
    finally:
        os.close(fd)


def read_file_text(
    path: Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    dir_fd: int | None = None,
    follow_symlinks: bool = False,
) -> str:
    """:func:`read_file` decoded as UTF-8; text that is not UTF-8 is refused (UntrustedFileError)."""
    data = read_file(path, max_bytes=max_bytes, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise UntrustedFileError(
            os.fspath(path), f"is not UTF-8 text (byte {exc.start})", errno.EILSEQ
        ) from None


def open_lock_file(path: Path, mode: int = 0o600) -> int:
    """A descriptor to ``flock`` of the regular file at ``path``, created with ``mode`` if absent.

    A link at the path is refused, never followed (or locked through: another process would lock
    the file it points to); a FIFO, socket or directory is refused too (UntrustedFileError), and
    the open never blocks. The caller keeps the descriptor as long as it holds the lock.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, _LOCK_FLAGS, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFileError(
                name, "is a symbolic link: a lock is never taken through one", errno.ELOOP
            ) from None
        raise _open_failed(name, exc, follow_symlinks=False) from None
    _check_regular(fd, name)
    return fd
