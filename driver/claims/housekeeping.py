"""The one periodic thread of ``numadra run``: keep the prepared-claims view fresh.

Every round, in this order: refresh the prepared-claims index (:mod:`driver.state.index`) when a
prepare or unprepare changed the journal, rediscover the host when asked (SIGHUP, a udev event)
or when the rescan period is over, then run the tasks given to
:meth:`Housekeeping.after_each_round` (``numadra run`` refreshes its metrics there). A round
starts when something asks for one (:meth:`Housekeeping.wake`, :meth:`Housekeeping.request_rescan`)
and at least every :data:`ROUND_INTERVAL`, which bounds how old the metrics get. One failing round
is logged and the next one runs: a broken rescan must not stop the index from following the
journal.

A wake (the journal changed) starts its round only after :data:`SETTLE_S`, and the wakes of that
time share the round. Every prepare and unprepare wakes the thread; a round right behind each
call would take the GIL while the gRPC threads are still answering that call, and a busy node
would make a round per call. The index is refreshed at once where freshness matters (a pinning lookup and
the claimed CPUs refresh a stale index themselves); what waits is the health stream's CDI IDs and
the metrics. A rescan request and a stop do not wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from driver.errors import DriverError
from driver.log import get_logger
from driver.supervise import supervised, survived

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

    from driver.state.index import PreparedIndex

__all__ = ["Housekeeping"]

#: the longest wait between two rounds (seconds): the metrics' staleness bound
ROUND_INTERVAL = 5.0
#: how long a wake waits before its round, gathering the wakes that follow (seconds)
SETTLE_S = 1.0

_log = get_logger("claims.housekeeping")


class Housekeeping:
    """The housekeeping thread (see the module docstring), between :meth:`start` and :meth:`stop`.

    ``rescan_interval`` <= 0 disables the periodic rescan (requests still rescan). Requests made
    before :meth:`start` are kept and served by the first round.
    """

    def __init__(
        self,
        *,
        index: PreparedIndex,
        rescan: Callable[[], object],
        rescan_interval: float,
        log: FilteringBoundLogger | None = None,
        settle: float = SETTLE_S,
    ) -> None:
        self._index = index
        self._rescan = rescan
        self._rescan_interval = rescan_interval
        self._settle = settle
        self._after: list[Callable[[], None]] = []
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._rescan_requested = False
        self._thread = supervised("app-housekeeping", self._loop)
        self._log = log if log is not None else _log

    def after_each_round(self, task: Callable[[], None]) -> None:
        """Run ``task`` at the end of every round (``numadra run`` refreshes its metrics there)."""
        self._after.append(task)

    def wake(self) -> None:
        """Run a round now (the journal changed).

        Every prepare and unprepare calls this, and while a wake waits out :data:`SETTLE_S` the
        flag is set already: setting it again would take the event's lock for nothing. A wake that
        finds it set is served by the round that clears it, which reads the journal after that.
        """
        if not self._wake.is_set():
            self._wake.set()

    def request_rescan(self) -> None:
        """Rediscover the host in the next round, which starts now."""
        self._rescan_requested = True
        self._wake.set()

    def start(self) -> None:
        """Start the thread (``app-housekeeping``)."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread: a round under way finishes, no other one starts."""
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        next_rescan = self._next_rescan()
        while not self._stopping.is_set():
            woken = self._wake.wait(min(ROUND_INTERVAL, max(0.0, next_rescan - time.monotonic())))
            if woken and not self._rescan_requested and self._stopping.wait(self._settle):
                return  # gathered the wakes of the settle time (a stop ends it at once)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                if self._index.stale:
                    self._index.refresh()
                if self._rescan_requested or time.monotonic() >= next_rescan:
                    self._rescan_requested = False
                    next_rescan = self._next_rescan()
                    self._rescan()
                for task in self._after:
                    task()
            except DriverError as exc:
                self._log.error("housekeeping failed", error=str(exc))
            except Exception as exc:  # a bug in one round: logged and counted, the next round runs
                survived("app-housekeeping", exc, event="housekeeping failed")

    def _next_rescan(self) -> float:
        interval = self._rescan_interval
        return time.monotonic() + interval if interval > 0 else float("inf")
