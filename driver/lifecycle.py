"""Start parts in order, stop the started ones in reverse: the lifecycle of ``numadra run``.

A part is anything with ``start()`` and ``stop()`` that owns what it started (a thread, a socket,
a file descriptor). :class:`Lifecycle` remembers each part once its ``start`` returned, so that
:meth:`Lifecycle.stop` stops exactly those, the last started first: the kubelet's sockets go
before the claims logic behind them closes. A start that fails stops what had started and
re-raises; a stop that fails is logged and the others still run, since one stuck part must not
keep the sockets around.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from driver.log import get_logger

__all__ = ["Lifecycle", "Part", "Step"]

_log = get_logger("lifecycle")


class Part(Protocol):
    """Something that runs between ``start`` and ``stop``."""

    def start(self) -> None:
        """Begin; raise when it cannot."""
        ...

    def stop(self) -> None:
        """End and let go of what ``start`` took."""
        ...


@dataclass(frozen=True, slots=True)
class Step:
    """One entry of the start order: a name for the logs and what to call."""

    name: str
    start: Callable[[], object]
    stop: Callable[[], object]

    @classmethod
    def of(cls, name: str, part: Part) -> Step:
        """The step that starts and stops ``part``."""
        return cls(name, part.start, part.stop)


class Lifecycle:
    """The started steps of one process, stopped in reverse by :meth:`stop` (idempotent)."""

    def __init__(self) -> None:
        self._started: list[Step] = []
        self._lock = threading.Lock()

    @property
    def started(self) -> tuple[str, ...]:
        """The names of the steps started and not stopped yet, in start order."""
        with self._lock:
            return tuple(step.name for step in self._started)

    def start(self, steps: Iterable[Step]) -> None:
        """Start each step in order; when one fails, stop every started step and re-raise."""
        try:
            for step in steps:
                step.start()
                with self._lock:
                    self._started.append(step)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every started step, the last started first; a second call finds nothing to stop."""
        while True:
            with self._lock:
                if not self._started:
                    return
                step = self._started.pop()
            try:
                step.stop()
            except Exception as exc:
                _log.error("stop failed", component=step.name, error=str(exc))
