"""Atomic file writes and removal for spec files (also used for the journal and metadata files).

A runtime may read a spec directory at any moment, and a crash may strike between any two syscalls:
write to a temp file in the same directory, fsync it, rename it over the target, fsync the
directory. Readers then see the old file or the new one, never a torn one, and the rename survives
power loss.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
from pathlib import Path
from typing import Any

from cdi.spec import Spec, validate_spec

__all__ = [
    "atomic_write_bytes",
    "fsync_dir",
    "make_dir",
    "remove_dir",
    "remove_file",
    "spec_bytes",
    "spec_json_bytes",
    "write_all",
    "write_spec",
]

_counter = itertools.count()


def fsync_dir(directory: Path) -> None:
    """Flush a directory entry change (rename, unlink) to disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_name(path: str) -> str:
    """A temp name unique per process, thread and call, hidden and not matching ``*.json``."""
    head, sep, name = path.rpartition("/")
    return f"{head}{sep}.{name}.{os.getpid()}.{threading.get_ident()}.{next(_counter)}.tmp"


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``: ``os.write`` may write less (a signal, a full disk on the way)."""
    written = os.write(fd, data)  # one call for every file this driver writes
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, mode: int = 0o644, *, sync: bool = True
) -> None:
    """Replace ``path`` with ``data`` atomically; the temp file lives in the same directory.

    ``sync=False`` skips both fsyncs: for files that can be re-created from a durable record (the
    journal) or that live on tmpfs (``/var/run``), where fsync costs time and buys nothing.
    The file gets exactly ``mode`` whatever the umask.
    """
    # plain strings, not pathlib: this runs for every file of every prepare (hot path)
    target = os.fspath(path)
    tmp = _temp_name(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        try:
            os.fchmod(fd, mode)
            write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(Path(os.path.dirname(target) or "."))


def spec_bytes(spec: Spec) -> bytes:
    """The exact bytes written for ``spec`` (validated; stable key order, so equal specs compare equal).

    The same bytes as ``spec_json_bytes(spec.to_json())``, encoded straight from the model.
    """
    validate_spec(spec)
    return (spec.json_text() + "\n").encode()


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


def remove_file(path: str | os.PathLike[str], *, sync: bool = False) -> bool:
    """Remove ``path``; a missing file is a no-op. Returns True when a file was removed."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    if sync:
        fsync_dir(Path(os.path.dirname(os.fspath(path)) or "."))
    return True


def make_dir(path: str | os.PathLike[str], mode: int = 0o777) -> None:
    """``Path(path).mkdir(mode, parents=True, exist_ok=True)`` on plain strings (per-claim hot path).

    Missing parents are made with the default mode (0o777 minus the umask), as pathlib makes them.
    """
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(os.fspath(path)), exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, mode)


def remove_dir(path: str | os.PathLike[str]) -> None:
    """Remove an empty directory (``rmdir``; OSError as the syscall raises it)."""
    os.rmdir(path)
