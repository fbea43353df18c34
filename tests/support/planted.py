"""Things an attacker or an accident leaves at a path numadra reads, made for real.

Each :data:`PLANTS` entry turns a path into something that is not the regular file numadra
expects: a FIFO (an open without ``O_NONBLOCK`` waits for a writer forever), a unix socket, a
directory, symbolic links (to ``/dev/zero``, endless, and to a FIFO), a sparse file of a terabyte
(no disk used) and a dense file just over a cap. The fault tests plant each of them at every path
the driver reads and require a clear refusal or a normal start, never a hang.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["PLANTS", "plant"]

#: a sparse file's apparent size: far beyond any cap, no block on disk
SPARSE_BYTES = 1 << 40
#: a dense file's size: beyond every cap but the user-file one, small enough to write quickly
HUGE_BYTES = (16 << 20) + 1


def _fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)


def _socket(path: Path) -> None:
    # bound at a short path (AF_UNIX paths are limited to 107 bytes), then renamed into place
    short = Path(tempfile.mkdtemp(prefix="sock", dir="/tmp"))
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(short / "s"))
        sock.close()  # the inode stays: a socket file nobody listens on
        (short / "s").rename(path)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def _directory(path: Path) -> None:
    path.mkdir()


def _link_to_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _link_to_fifo(path: Path) -> None:
    target = path.with_name(f".{path.name}.fifo-target")
    os.mkfifo(target, 0o600)
    path.symlink_to(target)


def _sparse(path: Path) -> None:
    with path.open("wb") as fh:
        fh.truncate(SPARSE_BYTES)


def _huge(path: Path) -> None:
    with path.open("wb") as fh:
        fh.write(b"{" + b" " * (HUGE_BYTES - 2) + b"}")


#: name -> how to plant it at a path (whose parent exists and which does not)
PLANTS: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "socket": _socket,
    "directory": _directory,
    "link-to-dev-zero": _link_to_zero,
    "link-to-fifo": _link_to_fifo,
    "sparse-1TiB": _sparse,
    "huge": _huge,
}


def plant(kind: str, path: Path) -> None:
    """Put a ``kind`` (a :data:`PLANTS` key) at ``path``, replacing a file that is there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    PLANTS[kind](path)
