"""Claim containers refused or left unpinned, made visible: a counter and an Event on the pod.

The pinning backends hand every :class:`~driver.pinning.failures.PinFailure` to a sink (they
import nothing above pinning). :class:`PinningReports` is that sink in ``numadra run``:

* it counts the failure at once (``numadra_pinning_failures_total{reason, action}``, through the
  :class:`~driver.observability.metrics.Metrics` attached; failures before that are replayed on
  attach), so an alert fires whether or not an Event can be written;
* it queues a core/v1 **Warning Event** on the pod (``involvedObject`` the pod, reason
  ``NumadraPinningRefused`` or ``NumadraNotPinned``, the failure's message), written by a thread
  of its own: the sink is called on the runtime's path and must never wait for the apiserver.
  Best effort and bounded: at most one Event per pod and reason per ``per_pod_interval_s``, a
  token bucket over all pods (a tenant creating many pods that copy a marker cannot flood the
  apiserver), a bounded queue; what is dropped is counted in :attr:`PinningReports.dropped`.
  A refused container's pod also gets the kubelet's own CreateContainerError event, with the
  same message; the Event here names numadra as the source and stays when the kubelet's is gone.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from driver.errors import DriverError
from driver.log import get_logger
from driver.pinning.failures import ACTION_REFUSED, PinFailure

if TYPE_CHECKING:
    from driver.observability.metrics import Metrics

__all__ = ["EVENT_REASON_NOT_PINNED", "EVENT_REASON_REFUSED", "PinningReports", "pin_failure_event"]

#: the Event reason of a refused claim container
EVENT_REASON_REFUSED = "NumadraPinningRefused"
#: the Event reason of a claim container created or left without its claim's pinning
EVENT_REASON_NOT_PINNED = "NumadraNotPinned"
#: the longest message an Event carries here (the events.k8s.io note limit)
_MAX_MESSAGE = 1024

#: writes one Event into a namespace (``KubeClient.create_event``)
PostEvent = Callable[[str, Mapping[str, Any]], object]

_log = get_logger("observability.pinreports")


def pin_failure_event(failure: PinFailure, *, node_name: str, now: datetime | None = None) -> dict[str, Any]:
    """The core/v1 Warning Event for one failure, on its pod (``generateName`` from the pod name)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    reason = EVENT_REASON_REFUSED if failure.action == ACTION_REFUSED else EVENT_REASON_NOT_PINNED
    involved: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": failure.pod_namespace,
        "name": failure.pod_name,
        "uid": failure.pod_uid,
    }
    if failure.container:
        involved["fieldPath"] = f"spec.containers{{{failure.container}}}"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{failure.pod_name or 'pod'}.", "namespace": failure.pod_namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": f"{failure.message} [{failure.reason}]"[:_MAX_MESSAGE],
        "type": "Warning",
        "source": {"component": "numadra", "host": node_name},
        "reportingComponent": "numadra",
        "reportingInstance": node_name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class PinningReports:
    """The pinning failure sink of ``numadra run`` (see the module docstring).

    ``post_event`` None: count only (no apiserver, or Events not wanted).
    """

    def __init__(
        self,
        post_event: PostEvent | None,
        *,
        node_name: str,
        per_pod_interval_s: float = 60.0,
        burst: int = 10,
        refill_per_s: float = 0.2,
        max_queued: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._post = post_event
        self._node = node_name
        self._interval = per_pod_interval_s
        self._burst = float(burst)
        self._refill = refill_per_s
        self._clock = clock
        self._lock = threading.Lock()
        self._metrics: Metrics | None = None
        #: failures by (reason, action) since start (replayed into the metrics when attached)
        self.totals: Counter[tuple[str, str]] = Counter()
        #: Events not written: rate-limited, queue full, or the apiserver refused them
        self.dropped = 0
        #: Events written
        self.posted = 0
        self._last: dict[tuple[str, str], float] = {}
        self._tokens = float(burst)
        self._filled = clock()
        self._queue: queue.Queue[dict[str, Any] | threading.Event | None] = queue.Queue(max_queued)
        self._thread: threading.Thread | None = None
        self._closed = False

    def attach_metrics(self, metrics: Metrics) -> None:
        """Count into ``metrics`` from now on, after adding what was counted before."""
        with self._lock:
            self._metrics = metrics
            for (reason, action), count in self.totals.items():
                metrics.count_pinning_failure(reason, action, count)

    def __call__(self, failure: PinFailure) -> None:
        """Count ``failure`` and queue its Event (never blocks)."""
        with self._lock:
            self.totals[(failure.reason, failure.action)] += 1
            if self._metrics is not None:
                self._metrics.count_pinning_failure(failure.reason, failure.action)
            if self._post is None or self._closed or not self._admit(failure):
                return
            event = pin_failure_event(failure, node_name=self._node)
            try:
                self._queue.put_nowait(event)
            except queue.Full:
                self.dropped += 1
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pinning-events", daemon=True)
                self._thread.start()

    def _admit(self, failure: PinFailure) -> bool:
        """Rate limits (the caller holds the lock): per pod and reason, then the shared bucket."""
        now = self._clock()
        key = (failure.pod_uid or f"{failure.pod_namespace}/{failure.pod_name}", failure.reason)
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self.dropped += 1
            return False
        self._tokens = min(self._burst, self._tokens + (now - self._filled) * self._refill)
        self._filled = now
        if self._tokens < 1:
            self.dropped += 1
            return False
        self._tokens -= 1
        if len(self._last) >= 4096:  # forget pods not heard of for a while
            self._last = {k: t for k, t in self._last.items() if now - t < self._interval}
        self._last[key] = now
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until the Events queued before are written or dropped (tests, shutdown)."""
        with self._lock:
            if self._thread is None:
                return True
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Stop taking Events, write what is queued (up to ``timeout``), end the thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def _run(self) -> None:
        assert self._post is not None
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            namespace = str(item["metadata"]["namespace"])
            try:
                self._post(namespace, item)
            except (DriverError, OSError) as exc:
                with self._lock:
                    self.dropped += 1
                _log.warning(
                    "cannot write the pinning Event",
                    pod=f"{namespace}/{item['involvedObject']['name']}",
                    reason=item["reason"],
                    error=str(exc),
                )
                continue
            with self._lock:
                self.posted += 1
