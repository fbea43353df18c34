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

from driver.plugin import Claim, ClaimRef, DriverPlugin, PrepareResult

if TYPE_CHECKING:
    from driver.observability.metrics import Metrics

__all__ = ["MAX_PENDING_OBSERVATIONS", "MeteredPlugin"]

#: observations kept until the metrics are attached (a second or so after registration)
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
    """

    def __init__(self, inner: DriverPlugin, on_change: Callable[[], None]) -> None:
        self._inner = inner
        self._on_change = on_change
        self._metrics: Metrics | None = None
        self._lock = threading.Lock()
        self._pending: deque[tuple[_Op, bool, float]] = deque(maxlen=MAX_PENDING_OBSERVATIONS)

    @property
    def metrics(self) -> Metrics | None:
        """The attached metrics facade (None before :meth:`attach_metrics`)."""
        return self._metrics

    def attach_metrics(self, metrics: Metrics) -> None:
        """Report to ``metrics`` from now on, starting with what was observed before."""
        with self._lock:
            self._metrics = metrics
            pending, self._pending = list(self._pending), deque(maxlen=MAX_PENDING_OBSERVATIONS)
        for op, ok, seconds in pending:
            _observe(metrics, op, ok, seconds)

    def prepare_claims(self, claims: Sequence[Claim]) -> Mapping[str, PrepareResult]:
        """Prepare through the claims driver; count every claim's result."""
        uids = [claim.ref.uid for claim in claims]
        return self._metered("prepare", self._inner.prepare_claims, claims, uids, lambda result: result.ok)

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Unprepare through the claims driver; count every claim's result."""
        uids = [ref.uid for ref in claims]
        return self._metered("unprepare", self._inner.unprepare_claims, claims, uids, lambda error: not error)

    def _metered(
        self,
        op: _Op,
        call: Callable[[Sequence[_C]], Mapping[str, _R]],
        claims: Sequence[_C],
        uids: Sequence[str],
        ok: Callable[[_R], bool],
    ) -> Mapping[str, _R]:
        """Run one call; observe each claim's outcome (all failed if it raised), then ``on_change``."""
        start = time.perf_counter()
        try:
            results = call(claims)
        except BaseException:
            self._observe(op, dict.fromkeys(uids, False), time.perf_counter() - start)
            raise
        finally:
            self._on_change()
        self._observe(op, {uid: ok(r) for uid, r in results.items()}, time.perf_counter() - start)
        return results

    def observe_refused(self, count: int, seconds: float) -> None:
        """Count ``count`` claims the kubelet layer refused before the driver (unreadable, replaced,
        unallocated) as failed prepares: an apiserver that cannot serve the claims must show in
        ``numadra_prepare_total{result="error"}`` and its alert like any other failure."""
        self._observe("prepare", {str(i): False for i in range(count)}, seconds)

    def handle_error(self, err: BaseException, msg: str) -> None:
        """Background failures go to the claims driver's policy (log, or stop when fatal)."""
        self._inner.handle_error(err, msg)

    def _observe(self, op: _Op, outcome: Mapping[str, bool], seconds: float) -> None:
        with self._lock:
            metrics = self._metrics
            if metrics is None:
                self._pending.extend((op, ok, seconds) for ok in outcome.values())
                return
        succeeded = sum(outcome.values())
        for ok, claims in ((True, succeeded), (False, len(outcome) - succeeded)):
            if claims:
                _observe(metrics, op, ok, seconds, claims)


def _observe(metrics: Metrics, op: _Op, ok: bool, seconds: float, claims: int = 1) -> None:
    observe = metrics.observe_prepare if op == "prepare" else metrics.observe_unprepare
    observe("success" if ok else "error", seconds, claims)
