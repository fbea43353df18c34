"""Atomic file writes and removal for spec files (also used for the journal and metadata files).

A runtime may read a spec directory at any moment, and a crash may strike between any two syscalls:
write to a temp file in the same directory, fsync it, rename it over the target, fsync the
directory. Readers then see the old file or the new one, never a torn one, and the rename survives
power loss.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from cdi.spec import Spec, validate_spec

__all__ = ["atomic_write_bytes", "fsync_dir", "remove_file", "spec_bytes", "spec_json_bytes", "write_spec"]


def fsync_dir(directory: Path) -> None:
    """Flush a directory entry change (rename, unlink) to disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; the temp file lives in the same directory.

    ``sync=False`` skips both fsyncs: for files under tmpfs (``/var/run``) they cost time and buy
    nothing, because tmpfs does not survive a power loss anyway.
    """
    directory = path.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        tmp.chmod(mode)
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if sync:
        fsync_dir(directory)


def spec_bytes(spec: Spec) -> bytes:
    """The exact bytes written for ``spec`` (validated; stable key order, so equal specs compare equal)."""
    validate_spec(spec)
    return spec_json_bytes(spec.to_json())


def spec_json_bytes(obj: dict[str, Any]) -> bytes:
    """Serialise an already rendered spec object the way :func:`spec_bytes` does."""
    return (json.dumps(obj, indent=2) + "\n").encode()


def write_spec(directory: Path, file_name: str, spec: Spec, *, sync: bool = True) -> Path:
    """Validate ``spec`` and write it atomically as ``directory/file_name``; returns the path."""
    if "/" in file_name or not file_name.endswith((".json", ".yaml")):
        raise ValueError(f"invalid CDI spec file name {file_name!r}")
    path = directory / file_name
    atomic_write_bytes(path, spec_bytes(spec), sync=sync)
    return path


def remove_file(path: Path, *, sync: bool = False) -> bool:
    """Remove ``path``; a missing file is a no-op. Returns True when a file was removed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    if sync:
        fsync_dir(path.parent)
    return True
