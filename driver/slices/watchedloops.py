"""Supervised loops around one watch, and the one way they stop.

The slice publisher (:mod:`driver.slices.publisher`) and the other drivers' slices watcher
(:mod:`driver.slices.foreign`) each run two loops under the supervisor, one of which follows a
watch of ResourceSlices. Stopping them is the same sequence, and its order matters:

1. set the stop flag under the owner's condition and wake every wait on it;
2. wake what waits elsewhere (a backoff's gate);
3. close the open watch, which ends the loop blocked in its stream (no event may come for minutes);
4. join the threads.

A watch opened while the stop runs is closed by the loop that opened it (:meth:`WatchedLoops.opened`),
so no stream outlives the stop. The owner passes its own condition: the flag and the watch are then
read under the same lock as the owner's state, and the owner's waits wake on the stop.

Both owners pace their loops with the same draws: :func:`watch_timeout_seconds` for each watch and
:func:`jittered` for a periodic wait, so a fleet started together drifts apart.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable

from driver.kube.client import SliceWatch

__all__ = ["WatchedLoops", "jittered", "watch_timeout_seconds"]


def watch_timeout_seconds(minimum: int, rng: random.Random) -> int:
    """A watch timeout in ``[minimum, 2 * minimum)`` seconds, as client-go's reflector draws it.

    Every renewal draws again, so nodes started in the same second drift apart within a few
    renewals instead of reconnecting together for ever.
    """
    if minimum < 1:
        raise ValueError(f"watch timeout must be at least 1 s, not {minimum}")
    return min(2 * minimum - 1, int(minimum * (1.0 + rng.random()))) if minimum > 1 else 1


def jittered(seconds: float, factor: float, rng: random.Random) -> float:
    """``seconds`` stretched by a random fraction of up to ``factor`` (``[s, s * (1 + factor))``)."""
    return seconds * (1.0 + factor * rng.random())


class WatchedLoops:
    """The threads, stop flag and open watch of an owner's loops (module docstring). Thread-safe.

    ``cond`` is the owner's condition (reentrant: the default ``threading.Condition()``), so the
    methods below may be called with it held. ``wake`` is called at a stop, before the watch is
    closed (a backoff's ``stop``).
    """

    def __init__(self, cond: threading.Condition, *, wake: Iterable[Callable[[], None]] = ()) -> None:
        self._cond = cond
        self._wake = tuple(wake)
        self._stopping = False
        self._watch: SliceWatch | None = None
        self._threads: list[threading.Thread] = []

    @property
    def stopping(self) -> bool:
        """The stop has begun: every loop returns."""
        with self._cond:
            return self._stopping

    @property
    def watching(self) -> bool:
        """A watch is open (opened and not yet marked closed)."""
        with self._cond:
            return self._watch is not None

    def start(self, *threads: threading.Thread) -> None:
        """Start the owner's loops (each made by :func:`~driver.supervise.supervised`)."""
        self._threads = list(threads)
        for thread in self._threads:
            thread.start()

    def opened(self, watch: SliceWatch) -> None:
        """A loop opened ``watch``: a stop from now on closes it; closed at once when one began."""
        with self._cond:
            self._watch = watch
            if self._stopping:
                watch.close()

    def closed(self) -> None:
        """The watch ended: nothing for a stop to close."""
        with self._cond:
            self._watch = None

    def wait(self, seconds: float) -> None:
        """Wait ``seconds`` on the owner's condition, or less when the stop begins.

        Other notifications wake the condition too: the wait goes on until its time is out.
        """
        until = time.monotonic() + seconds
        with self._cond:
            while not self._stopping and (left := until - time.monotonic()) > 0:
                self._cond.wait(left)

    def stop(self, timeout: float) -> None:
        """The stop sequence (module docstring); each thread is joined for up to ``timeout``."""
        with self._cond:
            self._stopping = True
            watch = self._watch
            self._cond.notify_all()
        for wake in self._wake:
            wake()
        if watch is not None:
            watch.close()
        for thread in self._threads:
            thread.join(timeout)
