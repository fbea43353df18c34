"""Claim ``status.devices`` writes off the prepare path: one FIFO worker thread.

:class:`~driver.claims.status.ClaimStatusWriter` does the writing; :class:`AsyncStatusWriter`
gives the claims driver the same three calls, queues them and returns at once. A write that fails
transiently (apiserver unreachable, 429, 5xx) is tried again, up to ``attempts`` times in all,
each attempt after the writer's backoff step: the Ready condition is not lost to a blip, and an
outage costs one request per step, not one per queued write. The queue is bounded: while the
apiserver hangs, a new write beyond :data:`MAX_QUEUED_WRITES` is dropped and logged with its
claim, instead of every later call's write being held in memory.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from driver.errors import KubeError
from driver.log import get_logger
from driver.supervise import supervised, survived

if TYPE_CHECKING:
    from driver.claims.status import ClaimStatusWriter
    from driver.inventory.model import Inventory
    from driver.kube.types import JsonObject
    from driver.plugin import DeviceHealth, PreparedDevice

__all__ = ["DEFAULT_ATTEMPTS", "MAX_QUEUED_WRITES", "AsyncStatusWriter"]

#: tries of one write in all; under the default RetryPolicy the last waits reach its ``cap``
DEFAULT_ATTEMPTS = 8
#: writes waiting at most (a write in hand not counted); only a long-hung apiserver fills it
MAX_QUEUED_WRITES = 4096

_ClaimKey = tuple[str, str, str]  # (namespace, name, uid)

_log = get_logger("health.status")


#: the :class:`ClaimStatusWriter` call a queued write makes
_Method = Literal["report_prepared", "clear", "set_health", "set_inventory"]


class _Write:
    """One queued call (method and arguments), the log keys that name its claim, and whether it
    was dropped meanwhile."""

    __slots__ = ("args", "claim", "dropped", "keys", "method")

    def __init__(
        self, method: _Method, args: tuple[Any, ...], keys: dict[str, str], claim: _ClaimKey | None
    ) -> None:
        self.method = method
        self.args = args
        self.keys = keys
        self.claim = claim  # set on a report: the claim whose later clear or report drops it
        self.dropped = False

    def run(self, writer: ClaimStatusWriter) -> None:
        """Make the call. Each method is named here, not stored as a callable, so that the scan of
        tests/unit/kube/test_retry_class.py sees which loop reaches the apiserver."""
        if self.method == "report_prepared":
            writer.report_prepared(*self.args)
        elif self.method == "clear":
            writer.clear(*self.args)
        elif self.method == "set_health":
            writer.set_health(*self.args)
        else:
            writer.set_inventory(*self.args)


class AsyncStatusWriter:
    """Writes claim ``status.devices`` from one background thread, in call order.

    The status write is one more apiserver round trip per claim that the kubelet need not wait
    for (it is informational, and best effort anyway); one FIFO worker keeps a claim's "report"
    before its "clear". The real writer is built by ``factory`` on the worker at its first use,
    so its imports stay off the registration path.

    A report still queued when the same claim (namespace, name and UID) is cleared or reported
    again is dropped: the clear removes whatever we applied and the newer report applies all of
    our entries, so the dropped apply would only have been undone. Under a burst (a 32-claim
    prepare, then its unprepare, while the worker is still busy) that saves one apiserver round
    trip per claim; one claim at a time never finds its report still queued.
    """

    def __init__(
        self,
        factory: Callable[[], ClaimStatusWriter],
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        max_queued: int = MAX_QUEUED_WRITES,
    ) -> None:
        self._factory = factory
        self._attempts = max(1, attempts)
        self._inner: ClaimStatusWriter | None = None
        self._queue: queue.Queue[_Write | None] = queue.Queue(max(1, max_queued))
        #: the queued, not yet started report of each claim
        self._reports: dict[_ClaimKey, _Write] = {}
        self._lock = threading.Lock()
        self._closing = False
        self._thread = supervised("claim-status", self._run)
        self._thread.start()

    def report_prepared(self, claim: JsonObject, devices: Sequence[PreparedDevice]) -> None:
        """Queue the Ready entries of a prepared claim."""
        meta = claim.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        key = (namespace, name, str(meta.get("uid", "")))
        keys = {"claim_uid": key[2], "claim": f"{meta.get('namespace')}/{meta.get('name')}"}
        write = _Write("report_prepared", (claim, devices), keys, key)
        with self._lock:  # queued and registered under the lock, which the worker takes first
            if not self._enqueue(write):
                return  # an older report still queued stays: better than none
            self._drop_report(key)
            self._reports[key] = write

    def clear(self, namespace: str, name: str, uid: str = "") -> None:
        """Queue the removal of our entries of an unprepared claim."""
        context = {"claim": f"{namespace}/{name}", "claim_uid": uid}
        with self._lock:
            self._drop_report((namespace, name, uid))
        self._enqueue(_Write("clear", (namespace, name, uid), context, None))

    def set_health(self, snapshot: Sequence[DeviceHealth]) -> None:
        """Queue a health report (a monitor listener): claims holding changed devices are updated."""
        self._enqueue(_Write("set_health", (snapshot,), {}, None))

    def set_inventory(self, inventory: Inventory) -> None:
        """Follow a changed inventory (in queue order)."""
        self._enqueue(_Write("set_inventory", (inventory,), {}, None))

    def close(self, timeout: float = 2.0) -> None:
        """Finish queued writes (up to ``timeout``), then stop the worker.

        Writes still waiting for the apiserver then are given up (status is informational; the
        kubelet's next prepare after a restart writes it again).
        """
        with contextlib.suppress(queue.Full):  # still full: the worker ends on _closing below
            self._queue.put(None, timeout=timeout)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._closing = True
            inner = self._inner
            if inner is not None:
                inner.stop()
            self._thread.join(timeout)

    def _enqueue(self, write: _Write) -> bool:
        """Queue ``write`` without waiting; False (logged, naming its claim) when the queue is full."""
        try:
            self._queue.put_nowait(write)
        except queue.Full:
            _log.warning("claim status write dropped: queue full", method=write.method, **write.keys)
            return False
        return True

    def _drop_report(self, key: _ClaimKey) -> None:
        """Drop the claim's queued report, if any (the caller holds the lock)."""
        queued = self._reports.pop(key, None)
        if queued is not None:
            queued.dropped = True
            _log.debug("queued claim status report dropped", **queued.keys)

    def _run(self) -> None:
        while True:
            write = self._queue.get()
            if write is None or self._closing:
                return
            if write.claim is not None:
                with self._lock:
                    if write.dropped:
                        continue
                    del self._reports[write.claim]  # started: a later clear must not drop it
            self._write(write)

    def _write(self, write: _Write) -> None:
        """Make one write, trying again after transient failures (each try waits its backoff)."""
        for attempt in range(1, self._attempts + 1):
            try:
                if self._inner is None:
                    self._inner = self._factory()
                write.run(self._inner)
                return
            except KubeError as exc:
                again = exc.transient and attempt < self._attempts and not self._closing
                if not again:
                    _log.warning("claim status write failed", error=str(exc), attempts=attempt, **write.keys)
                    return
                _log.info("claim status write failed, trying again", error=str(exc), **write.keys)
            except Exception as exc:  # status is informational: log (a bug: with its traceback), go on
                survived(
                    "claim-status", exc, event="claim status write failed", attempts=attempt, **write.keys
                )
                return
