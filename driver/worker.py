"""One bounded queue served by one daemon thread: how a caller hands work off and never waits for it.

The callers that need this are on someone else's clock: the claims driver answering the kubelet,
the NRI plugin answering the runtime, the slice publisher between two syncs. What they hand off
(an Event to post, a journal record to write) waits for a server or a lock that may hang, so the
hand-off must not. Every such hand-off needs the same few things, and :class:`QueueWorker` holds
them once:

* **bounded**: :meth:`~QueueWorker.put` never blocks; it returns False when the queue is full or
  the worker is closed, and the caller counts or logs the drop. While the handler hangs, what the
  worker holds is at most ``max_queued`` items plus the one in hand, however many callers put,
  so a hung apiserver cannot turn a flood of calls into unbounded memory;
* **lazy**: the thread starts with the first item, so a node that never needs a worker never runs
  its thread;
* **in order**: one item at a time, in the order put;
* **surviving**: an exception from the handler is logged with its traceback and counted under the
  worker's name (:func:`driver.supervise.survived`), and the next item is handled, so one bad
  item does not silently end every later one;
* **flush and close**: :meth:`~QueueWorker.flush` waits until what was queued before it is
  handled (tests, shutdown); :meth:`~QueueWorker.close` takes nothing more, handles what is
  queued until its timeout and gives up the rest, so a stop never waits longer than asked.

The handler runs on the worker's thread, never under the worker's lock: it may take its own locks
and call back into :meth:`~QueueWorker.put`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from driver.log import get_logger
from driver.supervise import supervised, survived

__all__ = ["QueueWorker"]

T = TypeVar("T")

_log = get_logger("worker")


class QueueWorker(Generic[T]):
    """Hands each item put to ``handler`` on one daemon thread named ``name`` (module docstring).

    Generic in the item type, so that each user's queue is checked as what it carries (an Event,
    a claim UID with its pods) and the handler's argument matches what is put.
    """

    def __init__(self, name: str, handler: Callable[[T], object], *, max_queued: int) -> None:
        if max_queued < 1:
            raise ValueError(f"queue worker {name}: max_queued must be at least 1, not {max_queued}")
        self.name = name
        self.max_queued = max_queued
        self._handler = handler
        # the bound is checked in put(); maxlen states it where the queue is made as well
        self._items: deque[T] = deque(maxlen=max_queued)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._accepted = 0  # items put and taken in
        self._handled = 0  # items the handler returned from (or raised from)
        self._given_up = 0  # items dropped by close() at its timeout

    @property
    def backlog(self) -> int:
        """Items queued and not yet taken by the thread (the one in hand is not counted)."""
        with self._cond:
            return len(self._items)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called: :meth:`put` takes nothing more."""
        with self._cond:
            return self._closed

    @property
    def given_up(self) -> int:
        """Items queued but never handled, because :meth:`close` reached its timeout first."""
        with self._cond:
            return self._given_up

    def put(self, item: T) -> bool:
        """Queue ``item`` and return at once: True when queued, False when full or closed."""
        with self._cond:
            if self._closed or len(self._items) >= self.max_queued:
                return False
            if self._thread is None:
                thread = supervised(self.name, self._run)
                thread.start()
                self._thread = thread
            self._items.append(item)
            self._accepted += 1
            self._cond.notify_all()
        return True

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` until every item queued before this call is handled.

        False when the time ran out first, or when :meth:`close` gave some of them up.
        """
        with self._cond:
            target = self._accepted
            self._cond.wait_for(lambda: self._handled + self._given_up >= target, timeout)
            return self._handled >= target

    def close(self, timeout: float) -> bool:
        """Take nothing more; handle what is queued until ``timeout``, then give up the rest.

        Returns True when the thread has ended (or never started). An item the handler still holds
        at the timeout cannot be taken from it: the thread ends when the handler returns. Safe to
        call again; a later call waits up to its own ``timeout`` for that end.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        if not thread.is_alive():
            return True
        with self._cond:
            left = len(self._items)
            self._items.clear()
            self._given_up += left
            self._cond.notify_all()
        if left:
            _log.warning("queue worker stopped with items left", worker=self.name, given_up=left)
        return False

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._items) or self._closed)
                if not self._items:
                    return  # closed and drained
                item = self._items.popleft()
            try:
                self._handler(item)
            except Exception as exc:  # one bad item must not end the worker: say which worker, go on
                survived(self.name, exc, event="queue worker handler failed", worker=self.name)
            finally:
                del item  # not held while the queue is empty
                with self._cond:
                    self._handled += 1
                    self._cond.notify_all()
