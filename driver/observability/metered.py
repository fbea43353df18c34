"""The :class:`~driver.plugin.DriverPlugin` the kubelet server calls: the claims driver, metered.

Kept apart from :mod:`driver.observability.metrics` so that importing it loads no prometheus:
the kubelet server gets this wrapper before the plugin registers, and the :class:`Metrics` facade
is attached only afterwards (prometheus is imported off the registration path).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypeVar

from driver.plugin import Claim, ClaimRef, DriverPlugin, PrepareResult, read_ahead_of

if TYPE_CHECKING:
    from driver.observability.metrics import Metrics

__all__ = ["MAX_PENDING_OBSERVATIONS", "MeteredPlugin"]

#: observations kept until the metrics are attached (a second or so after registration); after
#: it, the calls queued at most before the call that finds them applies them
MAX_PENDING_OBSERVATIONS = 4096

_Op = Literal["prepare", "unprepare"]
_R = TypeVar("_R")
_C = TypeVar("_C", Claim, ClaimRef)


class MeteredPlugin:
    """The claims driver plus metrics and a change notice.

    Each claim of a call is observed with the call's duration (the claims of one call are done
    together, concurrently). It wraps the driver behind the kubelet layer, so it sees the claims
    that layer read and checked, and times the driver's work without the reads; the claims that
    layer refused reach it through :meth:`observe_refused`. The metrics are
    attached after registration, since prometheus is not imported before the plugin registers;
    the kubelet may prepare in between, so observations made before :meth:`attach_metrics` are
    kept and handed over then. ``on_change`` runs after every
    call, also a failed one: the journal may have changed either way.

    A call only queues its observation: the prometheus series take a lock and walk the buckets per
    update, work the kubelet's call need not wait for. The queue is applied before every read of
    the metrics (:meth:`Metrics.add_pending`: a scrape sees every call that ended before it), by
    the housekeeping round that follows the call (:meth:`Metrics.apply_pending`), and by a call
    that finds :data:`MAX_PENDING_OBSERVATIONS` queued (rounds that stalled never let it grow).
    """

    def __init__(self, inner: DriverPlugin, on_change: Callable[[], None]) -> None:
        self._inner = inner
        self._on_change = on_change
        self._metrics: Metrics | None = None
        self._lock = threading.Lock()
        self._pending: deque[tuple[_Op, bool, float]] = deque(maxlen=MAX_PENDING_OBSERVATIONS)
        #: after the attach: (op, claims succeeded, claims failed, seconds) per call, not yet applied
        # applied by the call that makes it MAX_PENDING_OBSERVATIONS long: the bound only ever drops
        # an observation if as many more calls end while that one applies, more than the call slots
        self._queued: deque[tuple[_Op, int, int, float]] = deque(maxlen=2 * MAX_PENDING_OBSERVATIONS)
        #: one applier at a time: a read that waits for it finds the popped observations applied
        self._apply_lock = threading.Lock()
        self._inner_read_ahead = read_ahead_of(inner)  # decided once

    @property
    def metrics(self) -> Metrics | None:
        """The attached metrics facade (None before :meth:`attach_metrics`)."""
        return self._metrics

    def attach_metrics(self, metrics: Metrics) -> None:
        """Report to ``metrics`` from now on, starting with what was observed before."""
        metrics.add_pending(self.apply_queued)  # before the first call may queue
        with self._lock:
            self._metrics = metrics
            pending, self._pending = list(self._pending), deque(maxlen=MAX_PENDING_OBSERVATIONS)
        for op, ok, seconds in pending:
            _observe(metrics, op, ok, seconds)

    def apply_queued(self) -> None:
        """Apply the queued observations to the metrics (every read of them does it first)."""
        metrics = self._metrics
        if metrics is None:
            return
        queued = self._queued
        with self._apply_lock:
            while queued:
                op, succeeded, failed, seconds = queued.popleft()
                if succeeded:
                    _observe(metrics, op, True, seconds, succeeded)
                if failed:
                    _observe(metrics, op, False, seconds, failed)

    def read_ahead(self, claims: Sequence[Claim]) -> None:
        """The claims driver's work before the lock, when it has some (not timed: no claim's result)."""
        if self._inner_read_ahead is not None:
            self._inner_read_ahead(claims)

    def prepare_claims(self, claims: Sequence[Claim]) -> Mapping[str, PrepareResult]:
        """Prepare through the claims driver; count every claim's result."""
        return self._metered("prepare", self._inner.prepare_claims, claims, _failed_prepares)

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Unprepare through the claims driver; count every claim's result."""
        return self._metered("unprepare", self._inner.unprepare_claims, claims, _failed_unprepares)

    def _metered(
        self,
        op: _Op,
        call: Callable[[Sequence[_C]], Mapping[str, _R]],
        claims: Sequence[_C],
        failures: Callable[[Mapping[str, _R]], int],
    ) -> Mapping[str, _R]:
        """Run one call; observe each claim's outcome (all failed if it raised), then ``on_change``.

        Counts, not per-claim records: each observation is one metric update per outcome.
        """
        start = time.perf_counter()
        try:
            results = call(claims)
        except BaseException:
            self._observe(op, 0, len(claims), time.perf_counter() - start)
            raise
        finally:
            self._on_change()
        failed = failures(results)
        self._observe(op, len(results) - failed, failed, time.perf_counter() - start)
        return results

    def observe_refused(self, count: int, seconds: float) -> None:
        """Count ``count`` claims the kubelet layer refused before the driver (unreadable, replaced,
        unallocated) as failed prepares: an apiserver that cannot serve the claims must show in
        ``numadra_prepare_total{result="error"}`` and its alert like any other failure."""
        self._observe("prepare", 0, count, seconds)

    def handle_error(self, err: BaseException, msg: str) -> None:
        """Background failures go to the claims driver's policy (log, or stop when fatal)."""
        self._inner.handle_error(err, msg)

    def _observe(self, op: _Op, succeeded: int, failed: int, seconds: float) -> None:
        if self._metrics is None:  # set once, under the lock: read it without, check again with
            with self._lock:
                if self._metrics is None:
                    self._pending.extend([(op, True, seconds)] * succeeded + [(op, False, seconds)] * failed)
                    return
        queued = self._queued
        queued.append((op, succeeded, failed, seconds))
        if len(queued) >= MAX_PENDING_OBSERVATIONS:
            self.apply_queued()


def _failed_prepares(results: Mapping[str, PrepareResult]) -> int:
    return sum(1 for result in results.values() if result.error)


def _failed_unprepares(errors: Mapping[str, str]) -> int:
    return sum(1 for error in errors.values() if error)


def _observe(metrics: Metrics, op: _Op, ok: bool, seconds: float, claims: int = 1) -> None:
    observe = metrics.observe_prepare if op == "prepare" else metrics.observe_unprepare
    observe("success" if ok else "error", seconds, claims)
