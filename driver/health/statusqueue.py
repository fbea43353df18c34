"""Claim ``status.devices`` writes off the prepare path: one FIFO worker thread.

:class:`~driver.health.status.ClaimStatusWriter` does the writing; :class:`AsyncStatusWriter`
gives the claims driver the same three calls, queues them and returns at once.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from driver.log import get_logger

if TYPE_CHECKING:
    from driver.health.status import ClaimStatusWriter
    from driver.inventory.model import Inventory
    from driver.kube.types import JsonObject
    from driver.plugin import DeviceHealth, PreparedDevice

__all__ = ["AsyncStatusWriter"]

_Write = tuple["Callable[[ClaimStatusWriter], object]", dict[str, str]]

_log = get_logger("health.status")


class AsyncStatusWriter:
    """Writes claim ``status.devices`` from one background thread, in call order.

    The status write is one more apiserver round trip per claim that the kubelet need not wait
    for (it is informational, and best effort anyway); one FIFO worker keeps a claim's "report"
    before its "clear". The real writer is built by ``factory`` on the worker at its first use,
    so its imports stay off the registration path.
    """

    def __init__(self, factory: Callable[[], ClaimStatusWriter]) -> None:
        self._factory = factory
        self._inner: ClaimStatusWriter | None = None
        #: each write with the log keys that name its claim (a failure is logged on the worker)
        self._queue: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="claim-status", daemon=True)
        self._thread.start()

    def report_prepared(self, claim: JsonObject, devices: Sequence[PreparedDevice]) -> None:
        """Queue the Ready entries of a prepared claim."""
        meta = claim.get("metadata") or {}
        keys = {"claim_uid": str(meta.get("uid", "")), "claim": f"{meta.get('namespace')}/{meta.get('name')}"}
        self._queue.put((lambda writer: writer.report_prepared(claim, devices), keys))

    def clear(self, namespace: str, name: str, uid: str = "") -> None:
        """Queue the removal of our entries of an unprepared claim."""
        context = {"claim": f"{namespace}/{name}", "claim_uid": uid}
        self._queue.put((lambda writer: writer.clear(namespace, name, uid), context))

    def set_health(self, snapshot: Sequence[DeviceHealth]) -> None:
        """Queue a health report (a monitor listener): claims holding changed devices are updated."""
        self._queue.put((lambda writer: writer.set_health(snapshot), {}))

    def set_inventory(self, inventory: Inventory) -> None:
        """Follow a changed inventory (in queue order)."""
        self._queue.put((lambda writer: writer.set_inventory(inventory), {}))

    def close(self, timeout: float = 2.0) -> None:
        """Finish queued writes (up to ``timeout``), then stop the worker."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            write = self._queue.get()
            if write is None:
                return
            call, keys = write
            try:
                if self._inner is None:
                    self._inner = self._factory()
                call(self._inner)
            except Exception as exc:  # status is informational: log and go on
                _log.warning("claim status write failed", error=str(exc), **keys)
