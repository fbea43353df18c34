"""The :class:`~driver.plugin.DriverPlugin` the kubelet server calls: the claims driver, metered.

Kept apart from :mod:`driver.observability.metrics` so that importing it loads no prometheus:
the kubelet server gets this wrapper before the plugin registers, and the :class:`Metrics` facade
is attached only afterwards (prometheus is imported off the registration path).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from driver.plugin import ClaimRef, DriverPlugin, PrepareResult

if TYPE_CHECKING:
    from driver.observability.metrics import Metrics

__all__ = ["MeteredPlugin"]


class MeteredPlugin:
    """The claims driver plus metrics and a change notice.

    Each claim of a call is observed with the call's duration (the claims of one call are done
    together, concurrently). ``metrics`` is attached after registration, since prometheus is not
    imported before the plugin registers. ``on_change`` runs after every call, also a failed one:
    the journal may have changed either way.
    """

    def __init__(self, inner: DriverPlugin, on_change: Callable[[], None]) -> None:
        self._inner = inner
        self._on_change = on_change
        self.metrics: Metrics | None = None

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        """Prepare through the claims driver; count every claim's result."""
        start = time.perf_counter()
        try:
            results = self._inner.prepare_claims(claims)
        except BaseException:
            self._observe("prepare", {ref.uid: False for ref in claims}, time.perf_counter() - start)
            raise
        finally:
            self._on_change()
        self._observe("prepare", {uid: r.ok for uid, r in results.items()}, time.perf_counter() - start)
        return results

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Unprepare through the claims driver; count every claim's result."""
        start = time.perf_counter()
        try:
            results = self._inner.unprepare_claims(claims)
        except BaseException:
            self._observe("unprepare", {ref.uid: False for ref in claims}, time.perf_counter() - start)
            raise
        finally:
            self._on_change()
        self._observe(
            "unprepare", {uid: not err for uid, err in results.items()}, time.perf_counter() - start
        )
        return results

    def handle_error(self, err: BaseException, msg: str) -> None:
        """Background failures go to the claims driver's policy (log, or stop when fatal)."""
        self._inner.handle_error(err, msg)

    def _observe(self, op: str, outcome: Mapping[str, bool], seconds: float) -> None:
        metrics = self.metrics
        if metrics is None:
            return
        observe = metrics.observe_prepare if op == "prepare" else metrics.observe_unprepare
        for ok in outcome.values():
            observe("success" if ok else "error", seconds)
