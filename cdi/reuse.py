"""Values worked out from immutable inputs, reused while the inputs are the very same objects.

A prepare spends much of its time on parts that depend on immutable objects handed to it again
and again: the text of a device's environment or nodes in a CDI spec (:mod:`cdi.spec`), the
encoded device object of the metadata files and the environment of a request of one inventory
device (``driver.claims``). The inventory hands out immutable objects and is replaced as a whole
when the host changes, and a renderer hands the same tuples to many specs, so a part worked out
from such objects stays right for as long as those objects are the ones passed. A
:class:`ReusedWhileSame` keeps each part with the objects it came from and hands it out again
only while a caller passes those very objects (``is``, never ``==``): a new inventory is a miss,
and since the objects are held with the part, their identity cannot pass to another object while
kept. Bounded: emptied when full. Thread-safe; callers must not change a value they get.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["ReusedWhileSame"]

V = TypeVar("V")
T = TypeVar("T")


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
            # map over operator.is_: a hit costs a fraction of a zip (strict) loop's time
            if len(kept) == len(inputs) and all(map(operator.is_, kept, inputs)):
                return hit[1]
        return self._keep(key, inputs, make())

    def of(self, obj: T, make: Callable[[T], V]) -> V:
        """The value kept for this very ``obj``, else ``make(obj)`` (then kept with it): keyed by
        the object itself, the lookup of a value that depends on one object alone (a text per
        tuple) costs a dict read and one ``is``."""
        hit = self._entries.get(id(obj))
        if hit is not None and hit[0][0] is obj:
            return hit[1]
        return self._keep(id(obj), (obj,), make(obj))

    def _keep(self, key: Hashable, inputs: tuple[object, ...], value: V) -> V:
        with self._lock:
            if len(self._entries) >= self._max:
                self._entries.clear()
            self._entries[key] = (inputs, value)
        return value
