"""Values worked out from immutable inputs, reused while the inputs are the very same objects.

Rendering a claim spends much of its time on parts that depend on one inventory device alone: the
encoded device object of the metadata files, the environment of a request of that device. The
inventory hands out immutable objects and is replaced as a whole when the host changes, so a part
worked out from a device object stays right for as long as that object is the one handed out. A
:class:`ReusedWhileSame` keeps each part with the objects it came from and hands it out again
only while a caller passes those very objects (``is``, never ``==``): a new inventory is a miss.
Bounded: emptied when full. Thread-safe; callers must not change a value they get.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["ReusedWhileSame"]

V = TypeVar("V")


class ReusedWhileSame(Generic[V]):
    """Values by key, each valid while its inputs are the objects it was made from."""

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[tuple[object, ...], V]] = {}

    def get(self, key: Hashable, inputs: tuple[object, ...], make: Callable[[], V]) -> V:
        """The value kept for ``key`` when it was made from ``inputs`` themselves, else ``make()``
        (then kept for ``key`` with ``inputs``)."""
        hit = self._entries.get(key)
        if hit is not None:
            kept = hit[0]
            if len(kept) == len(inputs) and all(a is b for a, b in zip(kept, inputs, strict=True)):
                return hit[1]
        value = make()
        with self._lock:
            if len(self._entries) >= self._max:
                self._entries.clear()
            self._entries[key] = (inputs, value)
        return value
