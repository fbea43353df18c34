"""Copies the components' own counters and gauges into the :class:`Metrics` facade.

The components count what happens to them in plain attributes (the publisher's writes and the
feature gates its slices miss, the taints' transitions, the claims' state recoveries) or can
answer a question (how many claims are prepared, which CPUs they hold, what each device's health
is); none of them knows prometheus. The
housekeeping thread of ``numadra run`` (:class:`driver.claims.housekeeping.Housekeeping`) calls
:meth:`MetricsUpdater.update` after every round, and ``numadra run`` calls it once when the
metrics are created, so the first scrape already sees every family. The publisher's failed writes
reach the metrics as they happen instead, through :func:`publish_error_handler`.

Components of the layers above this one (the kubelet server, the claims driver) are passed as the
plain values the metrics need: the registration event and a callable for the state recoveries.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from driver.errors import KubeError, RecoverableError

if TYPE_CHECKING:
    from driver.health.monitor import HealthMonitor
    from driver.health.taints import HealthTaints
    from driver.inventory.model import Inventory
    from driver.observability.metrics import Metrics
    from driver.pinning.planner import CpuPlanner
    from driver.slices.publisher import SlicePublisher
    from driver.state.index import PreparedIndex

__all__ = ["MetricsUpdater", "publish_error_handler"]

#: the publisher's writes, the operations of ``numadra_publish_errors_total``
_WRITES = frozenset({"create", "update", "delete"})


class MetricsUpdater:
    """Reads the running components and sets the gauges and counters of ``metrics``."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        inventory: Callable[[], Inventory],
        index: PreparedIndex,
        planner: CpuPlanner,
        registered: threading.Event,
        state_recoveries: Callable[[], Mapping[str, int]],
        monitor: HealthMonitor,
        taints: HealthTaints,
        publisher: SlicePublisher,
        adopted_releases: Callable[[], Mapping[str, int]] = dict,
        userspace_warnings: Callable[[], Mapping[str, int]] | None = None,
        events: Callable[[], Mapping[str, int]] = dict,
        loop_restarts: Callable[[], Mapping[str, int]] = dict,
        withheld: Callable[[], Mapping[tuple[str, str], int]] = dict,
    ) -> None:
        self.metrics = metrics
        self._inventory = inventory
        self._index = index
        self._planner = planner
        self._registered = registered
        self._state_recoveries = state_recoveries
        self._monitor = monitor
        self._taints = taints
        self._publisher = publisher
        self._adopted_releases = adopted_releases
        self._userspace_warnings = userspace_warnings
        self._events = events
        self._loop_restarts = loop_restarts
        self._withheld = withheld

    def update(self) -> None:
        """Set every metric that mirrors a component's state (cheap: no I/O, no apiserver)."""
        metrics, inventory = self.metrics, self._inventory()
        metrics.apply_pending()  # the calls' queued observations (the round follows the calls)
        metrics.set_prepared_claims(self._index.count())
        # reserved and (with --isolated-cpus exclude) isolated CPUs are never free for a claim
        taken = self._index.claimed_cpus() | self._planner.reserved_cpus
        free = {n.id: sum(1 for cpu in n.cpus if cpu not in taken) for n in inventory.numa_nodes}
        metrics.set_cpus_free(free)
        metrics.set_registered(self._registered.is_set())
        metrics.set_state_recoveries(self._state_recoveries())
        metrics.set_adopted_releases(self._adopted_releases())
        if self._userspace_warnings is not None:
            metrics.set_userspace_warnings(self._userspace_warnings())
        metrics.set_events(self._events())
        metrics.set_loop_restarts(self._loop_restarts())
        kinds = {dev.name: kind.value for kind, dev in inventory.devices()}
        counts: Counter[tuple[str, str]] = Counter()
        for health in self._monitor.health_snapshot():
            kind = kinds.get(health.device_name)
            if kind is not None:
                counts[(kind, health.state.value)] += 1
        metrics.set_device_counts(counts)
        metrics.set_taint_transitions(self._taints.transitions)
        metrics.set_publish_writes(self._publisher.stats.writes)
        metrics.set_fields_dropped(self._publisher.features.dropped_counts())
        metrics.set_withheld(self._withheld())


def publish_error_handler(
    metrics: Metrics, other: Callable[[BaseException, str], None]
) -> Callable[[BaseException], None]:
    """The publisher's ``on_error``: a failed write is counted by operation (the publisher already
    logged it and retries); any other error goes to ``other`` (the driver's ``handle_error``)."""

    def on_error(err: BaseException) -> None:
        cause = err.__cause__ if isinstance(err, RecoverableError) and err.__cause__ is not None else err
        if isinstance(cause, KubeError):
            if cause.verb in _WRITES:
                metrics.count_publish(cause.verb, error=True)
            return
        other(err, "slice publishing")

    return on_error
