"""The driver's Prometheus metrics behind a facade with one method per event.

Callers never touch prometheus-client objects: they say what happened (``observe_prepare("success",
0.004)``) and this module decides names, labels and buckets. Each :class:`Metrics` owns its own
registry, so two drivers in one test process (or two tests) never share counters, and label values
are checked against small fixed sets so that a bug cannot explode the series count.

Series (all prefixed ``numadra_``):

* ``prepare_total`` / ``unprepare_total`` {result}; ``prepare_duration_seconds`` /
  ``unprepare_duration_seconds`` {result} histograms (per claim, timing the driver call without
  the kubelet layer's claim reads; a claim that layer refuses counts as an error, timed by its reads);
* ``prepared_claims``: claims currently prepared on this node (from the journal);
* ``devices`` {type, health}: published devices;
* ``publish_operations_total`` {operation} and ``publish_errors_total`` {operation}: ResourceSlice
  writes (create/update/delete) and the failed ones;
* ``journal_recoveries_total`` {action}: what start-up reconciliation did per journal entry;
* ``state_recoveries_total`` {reason}: prepared claims the journal had lost, rebuilt from the
  files numadra wrote for them (reason: ``journal_missing``, ``journal_empty``,
  ``journal_deleted``, ``journal_replaced``, ``journal_truncated``, ``entry_missing``). Anything
  but 0 means the node's state was damaged: alert on it (docs/troubleshooting.md);
* ``pinning_failures_total`` {reason, action}: claim containers refused or not pinned as their
  claim says (``driver.pinning.failures``: a copied marker, consumers that could not be read, the
  time box, no pinner...). Each also gets a Warning Event on its pod. A copied marker is an
  attack worth knowing of; the other reasons mean pods do not start or run unpinned: alert on it;
* ``adopted_claim_releases_total`` {reason}: claims rebuilt from files after a journal loss that
  the apiserver confirmed gone (``not_found``, ``replaced``), released after the grace period;
* ``nvidia_userspace_warnings_total`` {source}: claims whose NVIDIA GPUs got the driver root's
  files although a toolkit spec could not serve them, or lacked files (``driver_root``), or got
  no driver user space at all (``none``), each also a Warning Event (docs/gpu-userspace.md);
* ``events_total`` {result}: Warning Events numadra handed to its poster (pinning refusals,
  NVIDIA user space, missing feature gates): ``posted`` (written to the apiserver) and
  ``dropped`` (its queue was full, the write failed, or the process stopped first). Events are
  best effort; a growing ``dropped`` means operators miss them, while the logs still say it all;
* ``api_fields_dropped`` {feature}: the field kinds of our slices the apiserver did not keep, by
  the feature gate that guards them (``driver.slices.features``: every gate of its table, and
  ``unknown``); anything but 0 means a gate is off on the apiserver and some devices mean less
  than published (docs/troubleshooting.md). A gate once seen missing stays so until a restart;
* ``devices_withheld`` {reason, owner}: our devices left out of the slices because another party
  owns them (``driver.slices.ownership``): reason ``dra-driver`` (owner: its driver name) or
  ``device-plugin`` (owner: the resource name in the Node's capacity); at most
  :data:`MAX_WITHHELD_OWNERS` owners get a series, the rest count under owner ``other``;
* ``cpus_free`` {numa_node}: online CPUs of each NUMA node neither reserved nor pinned to a claim;
* ``loop_restarts_total`` {loop}: exceptions that escaped a background loop (``driver.supervise``),
  each logged with its traceback; the loop ran again after a backoff step. Anything but 0 is a
  bug or an input the loop did not expect: read the log line ``background loop failed``. A core
  loop (``slice-publisher``, ``slice-watch``) that keeps failing also makes ``/readyz`` answer 503;
* ``registered``: 1 while the kubelet has registered the plugin, 0 before or after a failure;
* ``build_info`` {version, driver, node}: constant 1, to join other series on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from driver import __version__
from driver.pinning.consumers import GONE_REASONS as ADOPTED_RELEASE_REASONS
from driver.pinning.failures import PIN_FAILURE_ACTIONS, PIN_FAILURE_REASONS
from driver.slices.features import FEATURE_NAMES
from driver.state.journal import STATE_RECOVERY_REASONS

__all__ = [
    "ADOPTED_RELEASE_REASONS",
    "DEVICE_HEALTH_STATES",
    "DEVICE_TYPES",
    "EVENT_RESULTS",
    "FEATURE_NAMES",
    "JOURNAL_ACTIONS",
    "MAX_WITHHELD_OWNERS",
    "PIN_FAILURE_ACTIONS",
    "PIN_FAILURE_REASONS",
    "PUBLISH_OPERATIONS",
    "STATE_RECOVERY_REASONS",
    "USERSPACE_WARNING_SOURCES",
    "Metrics",
    "Result",
]

#: outcome of one claim operation
Result = Literal["success", "error"]

DEVICE_TYPES = ("gpu", "nic", "cpu", "memory")
#: owners of withheld devices with a series of their own (names other parties chose)
MAX_WITHHELD_OWNERS = 16
DEVICE_HEALTH_STATES = ("Healthy", "Unhealthy", "Unknown")
PUBLISH_OPERATIONS = ("create", "update", "delete")
#: ok: entry matched the disk; recreated: CDI/metadata rewritten; dropped: stale entry removed;
#: quarantined: entry could not be repaired and was set aside
JOURNAL_ACTIONS = ("ok", "recreated", "dropped", "quarantined")
TAINT_ACTIONS = ("added", "removed")
#: what became of a Warning Event handed to the poster (``EventPoster.posted`` / ``dropped``)
EVENT_RESULTS = ("posted", "dropped")
#: the NVIDIA user-space sources a claim is warned about (``ClaimsDriver.userspace_warnings``)
USERSPACE_WARNING_SOURCES = ("driver_root", "none")

# Prepare is fast on the hot path but can take seconds when the apiserver is slow: the buckets run
# from a millisecond to the kubelet's 45 s call timeout.
_CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 45.0)
_RESULTS: tuple[Result, ...] = ("success", "error")


def _observe_each(child: Histogram, seconds: float, claims: int) -> None:
    """One histogram observation per claim, through one looked-up child: the label lookup costs
    more than the observation, so it is done once per call, not once per claim."""
    for _ in range(claims):
        child.observe(seconds)


def _check(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {what} label {value!r}; expected one of {', '.join(allowed)}")
    return value


def _catch_up(
    counter: Counter, label: str, counted: dict[str, int], totals: Mapping[str, int], what: str
) -> None:
    """Increment ``counter`` by how much each running total grew since the last call."""
    for value, total in totals.items():
        _check(value, tuple(counted), what)
        delta = total - counted[value]
        if delta > 0:
            counter.labels(**{label: value}).inc(delta)
            counted[value] = total


class _ApplyPending:
    """A collector of no series, registered first: every read of the registry (a scrape,
    :meth:`Metrics.sample`, ``generate_latest``) collects it before any series, and it applies the
    observations that callers queued (:meth:`Metrics.add_pending`), so a read sees every call that
    ended before it."""

    def __init__(self, apply: Callable[[], None]) -> None:
        self._apply = apply

    def collect(self) -> Iterator[Metric]:
        """Apply what is queued; no series of its own."""
        self._apply()
        return iter(())


class Metrics:
    """All numadra metrics of one driver process, in their own registry."""

    def __init__(self, driver_name: str = "", node_name: str = "") -> None:
        #: what applies queued observations (:meth:`add_pending`), run before every read
        self._pending: list[Callable[[], None]] = []
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        r.register(_ApplyPending(self.apply_pending))  # first: collected before every series
        self._prepare = Counter("numadra_prepare", "Claims prepared, by result", ["result"], registry=r)
        self._unprepare = Counter("numadra_unprepare", "Claims unprepared, by result", ["result"], registry=r)
        self._prepare_seconds = Histogram(
            "numadra_prepare_duration_seconds",
            "Time to prepare one claim, by result",
            ["result"],
            buckets=_CLAIM_BUCKETS,
            registry=r,
        )
        self._unprepare_seconds = Histogram(
            "numadra_unprepare_duration_seconds",
            "Time to unprepare one claim, by result",
            ["result"],
            buckets=_CLAIM_BUCKETS,
            registry=r,
        )
        self._prepared_claims = Gauge("numadra_prepared_claims", "Claims currently prepared", registry=r)
        self._devices = Gauge(
            "numadra_devices", "Published devices by type and health", ["type", "health"], registry=r
        )
        self._publish_ops = Counter(
            "numadra_publish_operations", "ResourceSlice writes, by operation", ["operation"], registry=r
        )
        self._publish_errors = Counter(
            "numadra_publish_errors", "Failed ResourceSlice writes, by operation", ["operation"], registry=r
        )
        self._journal_recoveries = Counter(
            "numadra_journal_recoveries",
            "Journal entries reconciled at start-up, by action",
            ["action"],
            registry=r,
        )
        self._state_recoveries = Counter(
            "numadra_state_recoveries",
            "Prepared claims the journal had lost, rebuilt from the files numadra wrote, by reason",
            ["reason"],
            registry=r,
        )
        self._taint_transitions = Counter(
            "numadra_taint_transitions",
            "Unhealthy-device taints added to or removed from the published slices",
            ["action"],
            registry=r,
        )
        self._pinning_failures = Counter(
            "numadra_pinning_failures",
            "Claim containers refused or not pinned as their claim says, by reason and action",
            ["reason", "action"],
            registry=r,
        )
        self._adopted_releases = Counter(
            "numadra_adopted_claim_releases",
            "Claims rebuilt from files that the apiserver confirmed gone, released, by reason",
            ["reason"],
            registry=r,
        )
        self._userspace_warnings = Counter(
            "numadra_nvidia_userspace_warnings",
            "Claims whose NVIDIA GPUs got a fallback or no driver user space, by source",
            ["source"],
            registry=r,
        )
        self._events = Counter(
            "numadra_events",
            "Warning Events handed to the poster, by result: posted or dropped (queue full, failed, stopped)",
            ["result"],
            registry=r,
        )
        self._fields_dropped = Gauge(
            "numadra_api_fields_dropped",
            "Field kinds of the published slices the apiserver did not keep, by the feature gate behind them",
            ["feature"],
            registry=r,
        )
        self._withheld = Gauge(
            "numadra_devices_withheld",
            "Devices left out of the slices because another DRA driver or a device plugin owns them",
            ["reason", "owner"],
            registry=r,
        )
        self._withheld_seen: set[tuple[str, str]] = set()
        self._cpus_free = Gauge(
            "numadra_cpus_free",
            "Online CPUs of a NUMA node neither reserved nor pinned to a prepared claim",
            ["numa_node"],
            registry=r,
        )
        self._loop_restarts = Counter(
            "numadra_loop_restarts",
            "Exceptions that escaped a background loop, which then ran again, by loop",
            ["loop"],
            registry=r,
        )
        self._registered = Gauge(
            "numadra_registered", "1 while the kubelet has registered this plugin, else 0", registry=r
        )
        #: (call, result) -> its counter and histogram series (:meth:`_call_series`)
        self._series: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        #: the running totals already turned into increments, per counter and label value
        self._counted_taints: dict[str, int] = dict.fromkeys(TAINT_ACTIONS, 0)
        self._counted_writes: dict[str, int] = dict.fromkeys(PUBLISH_OPERATIONS, 0)
        self._counted_recoveries: dict[str, int] = dict.fromkeys(STATE_RECOVERY_REASONS, 0)
        self._counted_releases: dict[str, int] = dict.fromkeys(ADOPTED_RELEASE_REASONS, 0)
        self._counted_userspace: dict[str, int] = dict.fromkeys(USERSPACE_WARNING_SOURCES, 0)
        self._counted_events: dict[str, int] = dict.fromkeys(EVENT_RESULTS, 0)
        #: the loop names are the code's own thread names (``driver.supervise``): a fixed set
        self._counted_restarts: dict[str, int] = {}
        info = Gauge(
            "numadra_build_info",
            "Constant 1, labelled with version, driver and node",
            ["version", "driver", "node"],
            registry=r,
        )
        info.labels(version=__version__, driver=driver_name, node=node_name).set(1)
        # Pre-create the bounded label sets so dashboards see zeros instead of missing series.
        for result in _RESULTS:
            self._prepare.labels(result=result)
            self._unprepare.labels(result=result)
        for op in PUBLISH_OPERATIONS:
            self._publish_ops.labels(operation=op)
            self._publish_errors.labels(operation=op)
        for action in JOURNAL_ACTIONS:
            self._journal_recoveries.labels(action=action)
        for action in TAINT_ACTIONS:
            self._taint_transitions.labels(action=action)
        for reason in STATE_RECOVERY_REASONS:
            self._state_recoveries.labels(reason=reason)
        for reason in PIN_FAILURE_REASONS:
            for action in PIN_FAILURE_ACTIONS:
                self._pinning_failures.labels(reason=reason, action=action)
        for reason in ADOPTED_RELEASE_REASONS:
            self._adopted_releases.labels(reason=reason)
        for source in USERSPACE_WARNING_SOURCES:
            self._userspace_warnings.labels(source=source)
        for outcome in EVENT_RESULTS:
            self._events.labels(result=outcome)
        self.set_fields_dropped({})
        self.set_device_counts({})

    def add_pending(self, apply: Callable[[], None]) -> None:
        """Run ``apply`` before every read of the registry and in :meth:`apply_pending`: a caller
        that queues its observations off a hot path (the metered plugin) hands them over there."""
        self._pending.append(apply)

    def apply_pending(self) -> None:
        """Hand over every queued observation now (a read does it first; so does the updater)."""
        for apply in self._pending:
            apply()

    def observe_prepare(self, result: Result, seconds: float, claims: int = 1) -> None:
        """``claims`` claims of one call went through prepare in ``seconds``."""
        count, duration = self._call_series("prepare", result)
        count.inc(claims)
        _observe_each(duration, seconds, claims)

    def observe_unprepare(self, result: Result, seconds: float, claims: int = 1) -> None:
        """``claims`` claims of one call went through unprepare in ``seconds``."""
        count, duration = self._call_series("unprepare", result)
        count.inc(claims)
        _observe_each(duration, seconds, claims)

    def _call_series(self, op: str, result: str) -> tuple[Counter, Histogram]:
        """The counter and histogram series of ``op`` with ``result``, looked up once: ``labels()``
        checks the names and takes a lock on every call, twice per prepare and unprepare. A
        histogram's series still appears at its first observation."""
        series = self._series.get((op, result))
        if series is None:
            _check(result, _RESULTS, "result")
            if op == "prepare":
                count, duration = self._prepare, self._prepare_seconds
            else:
                count, duration = self._unprepare, self._unprepare_seconds
            series = (count.labels(result=result), duration.labels(result=result))
            self._series[(op, result)] = series  # a racing lookup stores the same two children
        return series

    def set_prepared_claims(self, count: int) -> None:
        """The number of claims the journal holds as prepared right now."""
        self._prepared_claims.set(count)

    def set_device_counts(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the device gauge: ``{(type, health): n}``; missing pairs read as 0."""
        for key in counts:
            _check(key[0], DEVICE_TYPES, "device type")
            _check(key[1], DEVICE_HEALTH_STATES, "health")
        for dtype in DEVICE_TYPES:
            for health in DEVICE_HEALTH_STATES:
                self._devices.labels(type=dtype, health=health).set(counts.get((dtype, health), 0))

    def set_cpus_free(self, free: Mapping[int, int]) -> None:
        """Free CPUs per NUMA node id (one series per node: bounded by the hardware)."""
        for node, count in free.items():
            self._cpus_free.labels(numa_node=str(int(node))).set(count)

    def set_fields_dropped(self, counts: Mapping[str, int]) -> None:
        """Replace the dropped-fields gauge: ``{feature gate: field kinds}``; missing gates read as 0."""
        for feature in counts:
            _check(feature, FEATURE_NAMES, "feature")
        for feature in FEATURE_NAMES:
            self._fields_dropped.labels(feature=feature).set(counts.get(feature, 0))

    def set_withheld(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the withheld gauge: ``{(reason, owner): devices}``; owners gone read as 0.

        Owner names come from other parties' objects: past :data:`MAX_WITHHELD_OWNERS` series,
        further owners are summed under ``other``, so the series stay bounded.
        """
        merged: dict[tuple[str, str], int] = {}
        for (reason, owner), count in sorted(counts.items()):
            key = (reason, owner)
            if key not in self._withheld_seen:
                if len(self._withheld_seen) >= MAX_WITHHELD_OWNERS:
                    key = (reason, "other")
                self._withheld_seen.add(key)
            merged[key] = merged.get(key, 0) + count
        for reason, owner in self._withheld_seen:
            self._withheld.labels(reason=reason, owner=owner).set(merged.get((reason, owner), 0))

    def set_registered(self, registered: bool) -> None:
        """Whether the kubelet's registration of the plugin succeeded (the alert's signal)."""
        self._registered.set(1 if registered else 0)

    def count_publish(self, operation: str, *, error: bool = False) -> None:
        """One ResourceSlice write (``create``/``update``/``delete``); ``error`` when it failed."""
        _check(operation, PUBLISH_OPERATIONS, "publish operation")
        self._publish_ops.labels(operation=operation).inc()
        if error:
            self._publish_errors.labels(operation=operation).inc()

    def count_journal_recovery(self, action: str, entries: int = 1) -> None:
        """Start-up reconciliation handled ``entries`` journal entries with ``action``."""
        _check(action, JOURNAL_ACTIONS, "journal action")
        self._journal_recoveries.labels(action=action).inc(entries)

    def set_state_recoveries(self, totals: Mapping[str, int]) -> None:
        """Catch up with the claims driver's running totals of claims rebuilt from evidence.

        ``{"journal_deleted": 1, ...}`` (``ClaimsDriver.state_recoveries``); calling this again
        with the same totals adds nothing.
        """
        _catch_up(self._state_recoveries, "reason", self._counted_recoveries, totals, "state recovery reason")

    def count_pinning_failure(self, reason: str, action: str, count: int = 1) -> None:
        """A claim container refused or not pinned (``driver.pinning.failures`` labels)."""
        _check(reason, PIN_FAILURE_REASONS, "pinning failure reason")
        _check(action, PIN_FAILURE_ACTIONS, "pinning failure action")
        self._pinning_failures.labels(reason=reason, action=action).inc(count)

    def set_adopted_releases(self, totals: Mapping[str, int]) -> None:
        """Catch up with the adopted-claims check's running totals of releases, by reason."""
        _catch_up(self._adopted_releases, "reason", self._counted_releases, totals, "adopted release reason")

    def set_userspace_warnings(self, totals: Mapping[str, int]) -> None:
        """Catch up with the claims driver's running totals of NVIDIA user-space warnings.

        ``{"driver_root": 1, "none": 0}`` (``ClaimsDriver.userspace_warnings``); calling this
        again with the same totals adds nothing.
        """
        _catch_up(self._userspace_warnings, "source", self._counted_userspace, totals, "user-space source")

    def set_events(self, totals: Mapping[str, int]) -> None:
        """Catch up with the Event poster's running totals ``{"posted": n, "dropped": m}``."""
        _catch_up(self._events, "result", self._counted_events, totals, "event result")

    def set_loop_restarts(self, totals: Mapping[str, int]) -> None:
        """Catch up with the supervisor's running totals of restarts by loop (``LOOPS.restarts()``).

        A loop seen for the first time gets its series (at 0 when it never failed).
        """
        for loop in totals:
            if loop not in self._counted_restarts:
                self._counted_restarts[loop] = 0
                self._loop_restarts.labels(loop=loop)
        _catch_up(self._loop_restarts, "loop", self._counted_restarts, totals, "loop")

    def set_publish_writes(self, totals: Mapping[str, int]) -> None:
        """Catch up with the publisher's cumulative successful writes ``{"create": n, ...}``.

        Failed writes are counted as they happen (:meth:`count_publish` with ``error``); calling
        this again with the same totals adds nothing.
        """
        _catch_up(self._publish_ops, "operation", self._counted_writes, totals, "publish operation")

    def set_taint_transitions(self, totals: Mapping[str, int]) -> None:
        """Catch up with the cumulative taint transitions ``{"added": n, "removed": m}``.

        The health side keeps plain running totals (no prometheus import there); this turns their
        growth into counter increments, so calling it again with the same totals adds nothing.
        """
        _catch_up(self._taint_transitions, "action", self._counted_taints, totals, "taint action")

    def sample(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The current value of one sample (tests and ``numadra state``); None when absent."""
        return self.registry.get_sample_value(name, dict(labels or {}))
