"""One prepare or unprepare at a time, across threads and across processes.

During a rolling update two plugin processes share the plugin directory and its state, and the
kubelet may send a prepare to one and the unprepare to the other. Like the Go helper we serialize
both calls with ``flock(LOCK_EX)`` on ``<plugin dir>/serialize.lock``. flock belongs to the open
file description, which all threads of this process share, so a thread mutex is taken first.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from driver.errors import DriverError
from driver.untrusted.files import open_lock_file

__all__ = ["SerializeLock"]


class SerializeLock:
    """An exclusive lock held around each driver call; open it once, hold it per call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self._fd: int | None = None

    def open(self) -> None:
        """Create or open the lock file (kept open for the process lifetime)."""
        if self._fd is None:
            try:
                self._fd = open_lock_file(self.path)  # a link, FIFO or directory there is refused
            except OSError as exc:
                raise DriverError(f"cannot open lock file {self.path}: {exc.strerror}") from exc

    def close(self) -> None:
        """Close the file; any flock still held by this process goes with it."""
        with self._mutex:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the thread mutex and the file lock for the duration of the ``with`` block."""
        with self._mutex:
            if self._fd is None:
                raise DriverError(f"lock file {self.path} is not open")
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
