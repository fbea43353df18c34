"""Claim containers refused or left unpinned, made visible: a counter and an Event on the pod.

The pinning backends hand every :class:`~driver.pinning.failures.PinFailure` to a sink (they
import nothing above pinning). :class:`PinningReports` is that sink in ``numadra run``:

* it counts the failure at once (``numadra_pinning_failures_total{reason, action}``, through the
  :class:`~driver.observability.metrics.Metrics` attached; failures before that are replayed on
  attach), so an alert fires whether or not an Event can be written;
* it hands a core/v1 **Warning Event** on the pod (``involvedObject`` the pod and container,
  reason ``NumadraPinningRefused``, ``NumadraNotPinned``, ``NumadraPinningWidened`` (a device
  container placed wider than its devices' NUMA node) or ``NumadraBadSetting`` (a pod annotation
  not understood, defaulted), the failure's message) to the driver's
  :class:`~driver.kube.events.EventPoster`, which writes it from a thread of its own: the sink
  is called on the runtime's path and must never wait for the apiserver. Best effort and
  bounded: at most one Event per pod and reason per ``per_pod_interval_s``, a token bucket over
  all pods (a tenant creating many pods that copy a marker cannot flood the apiserver), the
  poster's bounded queue; what is dropped is counted in :attr:`PinningReports.dropped`.
  A refused container's pod also gets the kubelet's own CreateContainerError event, with the
  same message; the Event here names numadra as the source and stays when the kubelet's is gone.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from driver.defaults import DRIVER_NAME
from driver.kube.events import EventPoster, InvolvedObject, warning_event
from driver.pinning.failures import ACTION_DEFAULTED, ACTION_REFUSED, ACTION_WIDENED, PinFailure

if TYPE_CHECKING:
    from driver.observability.metrics import Metrics

__all__ = [
    "EVENT_REASON_BAD_SETTING",
    "EVENT_REASON_NOT_PINNED",
    "EVENT_REASON_REFUSED",
    "EVENT_REASON_WIDENED",
    "PinningReports",
    "pin_failure_event",
]

#: the Event reason of a refused claim container
EVENT_REASON_REFUSED = "NumadraPinningRefused"
#: the Event reason of a claim container created or left without its claim's pinning
EVENT_REASON_NOT_PINNED = "NumadraNotPinned"
#: the Event reason of a device container pinned wider than its devices' NUMA node(s)
EVENT_REASON_WIDENED = "NumadraPinningWidened"
#: the Event reason of a pod setting (annotation) that was not understood and defaulted
EVENT_REASON_BAD_SETTING = "NumadraBadSetting"
_EVENT_REASONS = {
    ACTION_REFUSED: EVENT_REASON_REFUSED,
    ACTION_WIDENED: EVENT_REASON_WIDENED,
    ACTION_DEFAULTED: EVENT_REASON_BAD_SETTING,
}


def pin_failure_event(
    failure: PinFailure, *, node_name: str, component: str = DRIVER_NAME, now: datetime | None = None
) -> dict[str, Any]:
    """The core/v1 Warning Event for one failure, on its pod and container."""
    reason = _EVENT_REASONS.get(failure.action, EVENT_REASON_NOT_PINNED)
    pod = InvolvedObject(
        "Pod",
        failure.pod_name,
        uid=failure.pod_uid,
        namespace=failure.pod_namespace,
        field_path=f"spec.containers{{{failure.container}}}" if failure.container else "",
    )
    return warning_event(
        pod,
        reason=reason,
        message=f"{failure.message} [{failure.reason}]",
        component=component,
        host=node_name,
        now=now,
    )


class PinningReports:
    """The pinning failure sink of ``numadra run`` (see the module docstring).

    ``events`` None: count only (no apiserver, or Events not wanted).
    """

    def __init__(
        self,
        events: EventPoster | None,
        *,
        node_name: str,
        component: str = DRIVER_NAME,
        per_pod_interval_s: float = 60.0,
        burst: int = 10,
        refill_per_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._events = events
        self._node = node_name
        self._component = component
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
            if self._events is None or self._closed or not failure.event or not self._admit(failure):
                return
            event = pin_failure_event(failure, node_name=self._node, component=self._component)
        # outside the lock: post() may log a drop, and _written takes the lock on the poster's thread
        if not self._events.post(event, on_result=self._written):
            with self._lock:
                self.dropped += 1

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

    def _written(self, ok: bool) -> None:
        """The poster's word on one Event of ours."""
        with self._lock:
            if ok:
                self.posted += 1
            else:
                self.dropped += 1

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until the Events queued before are written or dropped (tests, shutdown)."""
        return True if self._events is None else self._events.flush(timeout)

    def close(self) -> None:
        """Stop taking Events (failures are still counted); the poster is closed by its owner."""
        with self._lock:
            self._closed = True
