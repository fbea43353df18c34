"""Make the apiserver's ResourceSlices of this node match the desired ones, with the fewest writes.

* What to write is decided by :func:`driver.slices.plan.plan_sync` (pure: generations, write
  order, zero writes when nothing changed); this module runs it against the apiserver.
* :class:`SlicePublisher` runs the plan on a background thread, never blocking its callers: the
  kubelet servers come up and register while the apiserver is unreachable, and the publisher
  retries under the driver's :class:`~driver.kube.backoff.RetryPolicy`. A watch on our own slices
  notices the kubelet's wipe (at kubelet start, or once we have been unreachable for its grace
  period) and re-creates them at once instead of after the Go controller's requeue delay.
* Periodic traffic is jittered so that a fleet started together does not stay in lockstep (the
  5,000 nodes of a large cluster would otherwise renew their watches in the same second every five
  minutes). Each watch asks for a timeout drawn from ``[watch_timeout, 2 * watch_timeout)``, as
  client-go's reflector does; the first sync waits a random ``[0, start_jitter)`` so that a
  restarted fleet does not LIST in one burst.
* There is no periodic re-LIST while the watch is open: the watch starts at the LIST's
  resourceVersion and resumes from the last event or bookmark it saw, so every change to our slices
  reaches us in order, and a 410 (history compacted) calls for a fresh LIST. A LIST every
  ``resync_interval`` (stretched by up to :data:`RESYNC_JITTER` of it) is armed only while the
  watch cannot be opened (a forbidden or failing watch), the one case where the view could go
  stale.
* A watch the server ends before it ran its course (an empty answer, a 410, an ERROR event, a
  stream cut in the middle) is a failure: the next one waits its backoff step, and a 410's re-LIST
  comes once per step. A fleet behind one broken proxy thus sends a bounded number of requests a
  minute, not a storm (tests/integration/publisher/test_retry_bounds.py counts them).
* Every write's answer is compared with what was sent: fields the apiserver dropped (a feature
  gate off, an older minor) or a 422 for a list attribute it could not keep go to
  :class:`~driver.slices.missingfeatures.MissingFeatures`, which names the gate once per cause.
  From then on the desired slices are sent in the form that is correct without that gate
  (:func:`driver.slices.features.adapt`), and what the apiserver keeps of a write is accepted as
  it is, so a dropped field never causes a rewrite loop.
"""

from __future__ import annotations

import copy
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from driver.errors import KubeError, recoverable
from driver.inventory.model import Inventory
from driver.kube.backoff import RetryPolicy
from driver.kube.client import SliceWatch, error_kind, slice_field_selector
from driver.log import get_logger
from driver.slices.features import (
    UNKNOWN,
    DroppedField,
    adapt,
    dropped_fields,
    refused_by_node,
    refused_fields,
)
from driver.slices.missingfeatures import MissingFeatures
from driver.slices.ownership import without
from driver.slices.plan import SlicePlan, plan_sync, slice_content, stored_resource_version
from driver.slices.watchedloops import WatchedLoops, jittered, watch_timeout_seconds
from driver.supervise import supervised
from driver.untrusted.values import object_or_empty

__all__ = [
    "PublisherStats",
    "SliceApi",
    "SlicePublisher",
    "Taints",
]

Obj = dict[str, Any]
Taints = Mapping[str, Sequence[Mapping[str, Any]]]  # device name -> taint dicts
BuildFn = Callable[[Inventory, Taints], list[Obj]]
_log = get_logger("slices.publisher")

#: how far past ``resync_interval`` a fallback re-LIST may be pushed (client-go's wait.Jitter factor)
RESYNC_JITTER = 0.5


class SliceApi(Protocol):
    """What the publisher needs from the apiserver (:class:`driver.kube.client.KubeClient` has it)."""

    def get_node(self, name: str) -> Obj: ...
    def list_resource_slices(
        self, *, field_selector: str = "", label_selector: str = ""
    ) -> tuple[list[Obj], str]: ...
    def create_resource_slice(self, obj: Mapping[str, Any]) -> Obj: ...
    def update_resource_slice(self, obj: Mapping[str, Any]) -> Obj: ...
    def delete_resource_slice(self, name: str, *, uid: str = "", resource_version: str = "") -> None: ...
    def watch_resource_slices(
        self, *, field_selector: str = "", resource_version: str = "", timeout_seconds: int = 300
    ) -> SliceWatch: ...


def _node_uid(node: Mapping[str, Any], node_name: str) -> str:
    """The Node's ``metadata.uid`` (the slices' owner reference); a KubeError when the answer has
    none: the sync fails and is retried like any failed call, instead of a ``KeyError``."""
    uid = object_or_empty(node.get("metadata")).get("uid")
    if not isinstance(uid, str) or not uid:
        raise KubeError(
            f"get node {node_name}: the answer has no metadata.uid",
            verb="get",
            resource="nodes",
            name=node_name,
        )
    return uid


def _owner(node_name: str, node_uid: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}


@dataclass(slots=True)
class PublisherStats:
    """Plain counters the metrics layer reads (no locking needed for reading ints)."""

    syncs: int = 0
    writes: Counter[str] = field(default_factory=Counter)  # "create" | "update" | "delete"
    errors: Counter[str] = field(default_factory=Counter)  # error_kind() labels
    foreign_deletions: int = 0  # our slices deleted by someone else (kubelet wipe): re-created
    last_sync_seconds: float = 0.0
    last_error: str = ""


class SlicePublisher:
    """Background publisher of this node's pool; see the module docstring.

    ``publish`` / ``republish`` / ``set_taints`` only record the wish and wake the loop. Errors go
    to ``on_error`` marked recoverable (the driver keeps running); ``published`` is set after the
    first successful sync (readiness). ``retry`` paces both loops (the sync and the watch, each
    with its own count of failures); ``rng`` draws every jitter (tests pass a seeded one).
    ``features`` hears of every field the apiserver did not keep (one that only logs by default).
    ``await_owners``: publish nothing before the first :meth:`set_withheld` (the owners of this
    node's devices are known), so a device another driver already publishes is never published.
    """

    def __init__(
        self,
        api: SliceApi,
        *,
        node_name: str,
        driver_name: str,
        build: BuildFn | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        retry: RetryPolicy | None = None,
        resync_interval: float = 600.0,
        watch_timeout: int = 300,
        start_jitter: float = 0.0,
        rng: random.Random | None = None,
        features: MissingFeatures | None = None,
        await_owners: bool = False,
    ) -> None:
        self._api = api
        self.node_name = node_name
        self.driver_name = driver_name
        self.features = features or MissingFeatures(node_name=node_name, driver_name=driver_name)
        self._build = build or self._default_build
        self._on_error = on_error
        self._rng = rng or random.Random()  # noqa: S311 - spreads load, guards no secret
        policy = retry or RetryPolicy()
        self._policy = policy
        self._sync_backoff = policy.backoff(self._rng)
        self._watch_backoff = policy.backoff(self._rng)
        self._resync_interval = resync_interval
        self._watch_timeout = watch_timeout
        self._start_jitter = start_jitter
        self._not_before = 0.0  # the first sync waits for its start jitter
        self._selector = slice_field_selector(node_name, driver_name)
        self.published = threading.Event()
        self.stats = PublisherStats()
        self._cond = threading.Condition()
        self._build_lock = threading.Lock()
        self._desired: list[Obj] | None = None
        self._inventory: Inventory | None = None
        self._taints: Taints = {}
        #: devices others own (driver.slices.ownership); None: not known yet, nothing is published
        self._withheld: frozenset[str] | None = None if await_owners else frozenset()
        self._version = 0  # bumps on every new desired state or foreign change
        self._synced_version = -1
        self._retry_at = 0.0
        self._resync_at = float("inf")
        self._loops = WatchedLoops(self._cond)  # the sync loop and the watch, and their stop
        self._node_uid = ""
        self._list_rv = ""
        self._sent: dict[str, str] = {}  # name -> content of our last write ("" = we deleted it)
        self._accepted: dict[str, tuple[str, str]] = {}

    def _default_build(self, inventory: Inventory, taints: Taints) -> list[Obj]:
        from driver.slices.builder import build_slices

        return build_slices(inventory, node_name=self.node_name, driver_name=self.driver_name, taints=taints)

    # -- caller side (never blocks on the apiserver) ---------------------------------------------
    def publish(self, desired: Sequence[Mapping[str, Any]]) -> None:
        """Make these complete slice objects the desired state of the pool."""
        with self._cond:
            self._desired = [copy.deepcopy(dict(s)) for s in desired]
            self._version += 1
            self._retry_at = 0.0  # a new wish is worth an immediate attempt
            self._cond.notify_all()

    def republish(self, inventory: Inventory) -> None:
        """Rebuild from a changed inventory (the udev watcher's callback). SliceError propagates."""
        with self._cond:
            self._inventory = inventory
        self._rebuild()

    def set_taints(self, taints: Taints) -> None:
        """New taints from the health model; rebuilds and republishes when an inventory is known."""
        with self._cond:
            if dict(taints) == dict(self._taints):
                return
            self._taints = {k: [dict(t) for t in v] for k, v in taints.items()}
        self._rebuild()

    def set_withheld(self, names: Collection[str]) -> None:
        """The devices another party owns (:mod:`driver.slices.foreign`): rebuilt without them.

        The first call also lets a publisher made with ``await_owners`` publish at all.
        """
        with self._cond:
            if self._withheld == frozenset(names):
                return
            self._withheld = frozenset(names)
        self._rebuild()

    def _rebuild(self) -> None:
        """Build from the latest inventory, taints and withheld devices; serialized, so the last
        publish is the newest."""
        with self._build_lock:
            with self._cond:
                inventory, taints, withheld = self._inventory, self._taints, self._withheld
            if inventory is not None and withheld is not None:
                self.publish(self._build(without(inventory, withheld), taints))

    def start(self) -> None:
        """Start the sync loop and the watch; returns at once (the first sync after its jitter)."""
        if self._start_jitter > 0:
            with self._cond:
                self._not_before = time.monotonic() + self._rng.uniform(0.0, self._start_jitter)
        # core loops: while one keeps failing, /readyz names it
        self._loops.start(
            supervised("slice-publisher", self._run, core=True, policy=self._policy),
            supervised("slice-watch", self._watch_loop, core=True, policy=self._policy),
        )

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both threads (pending work is dropped; slices stay, owned by the Node)."""
        self._loops.stop(timeout)

    def wait_synced(self, timeout: float) -> bool:
        """Block until the API matches the latest desired state (tests, shutdown, CLI)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._synced_version != self._version:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    # -- sync loop --------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._loops.stopping and not self._due():
                    self._cond.wait(self._idle_wait())
                if self._loops.stopping:
                    return
                desired, version = self._desired, self._version
            assert desired is not None
            self._attempt(desired, version)

    def _due(self) -> bool:
        now = time.monotonic()
        if self._desired is None or now < self._retry_at or now < self._not_before:
            return False
        return self._synced_version != self._version or now >= self._resync_at

    def _idle_wait(self) -> float:
        now = time.monotonic()
        later = [t for t in (self._retry_at, self._not_before) if t > now]
        wake = min([self._resync_at, *later])
        return max(0.01, min(wake - now, 60.0))

    def _attempt(self, desired: list[Obj], version: int) -> None:
        start = time.monotonic()
        try:
            self.sync(desired)
        except KubeError as err:
            delay = self._sync_backoff.failed(err)
            with self._cond:
                self.stats.errors[error_kind(err)] += 1
                self.stats.last_error = str(err)
                self._retry_at = time.monotonic() + delay
            _log.warning("slice sync failed", error=str(err), retry_in=round(delay, 2), node=self.node_name)
            self._report(err)
            return
        self._sync_backoff.succeeded()
        with self._cond:
            self.stats.syncs += 1
            self.stats.last_sync_seconds = time.monotonic() - start
            self._synced_version = version
            self._resync_at = float("inf") if self._loops.watching else self._next_resync()
            self._cond.notify_all()
        self.published.set()

    def _next_resync(self) -> float:
        """When to re-LIST while the watch is down: ``resync_interval`` plus up to ``RESYNC_JITTER`` of it."""
        return time.monotonic() + jittered(self._resync_interval, RESYNC_JITTER, self._rng)

    def _report(self, err: BaseException) -> None:
        if self._on_error is not None:
            self._on_error(recoverable(err))

    def sync(self, desired: Sequence[Mapping[str, Any]]) -> SlicePlan:
        """One synchronous reconcile (LIST, plan, write). Raises KubeError; used by the loop."""
        if not self._node_uid:
            self._node_uid = _node_uid(self._api.get_node(self.node_name), self.node_name)
        try:
            stored, list_rv = self._api.list_resource_slices(field_selector=self._selector)
        except KubeError as err:
            if err.status == 404:  # the whole collection is missing: the API is not served
                raise KubeError(
                    "the apiserver does not serve resource.k8s.io/v1 ResourceSlices (404 on LIST): "
                    "numadra needs Kubernetes 1.34 or newer with the resource.k8s.io/v1 API enabled "
                    f"({err})",
                    verb="list",
                    resource="resourceslices",
                    status=404,
                ) from err
            raise
        with self._cond:
            self._list_rv = list_rv
            self._cond.notify_all()
        wanted = adapt(desired, self.features.missing())  # as is when no gate is known missing
        plan = plan_sync(
            wanted, stored, owner=_owner(self.node_name, self._node_uid), accepted=self._accepted
        )
        if not plan.empty:
            _log.info(
                "publishing slices",
                node=self.node_name,
                generation=plan.generation,
                deletes=len(plan.deletes),
                updates=len(plan.updates),
                creates=len(plan.creates),
            )
        for obj in plan.deletes:
            name, uid = obj["metadata"]["name"], obj["metadata"].get("uid")
            self._note_sent(name, "")
            try:
                self._api.delete_resource_slice(
                    name,
                    uid=uid if isinstance(uid, str) else "",
                    resource_version=stored_resource_version(obj),
                )
            except KubeError as err:
                if err.status != 404:
                    raise
            self._count("delete")
        for obj in plan.updates:
            self._note_sent(obj["metadata"]["name"], slice_content(obj))
            self._check_kept(obj, self._write(self._api.update_resource_slice, obj))
            self._count("update")
        for obj in plan.creates:
            self._note_sent(obj["metadata"]["name"], slice_content(obj))
            self._check_kept(obj, self._write(self._api.create_resource_slice, obj))
            self._count("create")
        return plan

    def _write(self, call: Callable[[Obj], Obj], obj: Obj) -> Obj:
        """One create or update; a 422 or 403 that a gate explains is named (then raised as any error)."""
        try:
            return call(obj)
        except KubeError as err:
            refused = refused_fields(obj, str(err)) if err.status == 422 else ()
            refused = refused or refused_by_node(obj, err.status or 0, str(err))
            if refused:
                name = str(obj["metadata"]["name"])
                self.features.observe(name, refused, node_uid=self._node_uid, refused=True)
            raise

    def _count(self, verb: str) -> None:
        with self._cond:
            self.stats.writes[verb] += 1

    def _note_sent(self, name: str, content: str) -> None:
        """Remember a write before making it: its watch echo may arrive before the answer."""
        with self._cond:
            self._sent[name] = content

    def _check_kept(self, sent: Obj, stored: Obj) -> None:
        """Name the fields the apiserver dropped, and accept what it kept (no rewrite loop).

        A gate found missing here changes what is desired (:func:`adapt`): the pool is synced once
        more in that form.
        """
        name = str(sent["metadata"]["name"])  # ours; the answer's own may be anything
        mine, kept = slice_content(sent, with_generation=False), slice_content(stored, with_generation=False)
        dropped: tuple[DroppedField, ...] = ()
        if mine == kept:
            self._accepted.pop(name, None)
        else:
            # owners or labels changed, not the spec: no gate explains that
            dropped = dropped_fields(sent, stored) or (DroppedField("metadata", "metadata", UNKNOWN),)
            if self._accepted.get(name) != (mine, kept):
                self._accepted[name] = (mine, kept)
                self._note_sent(name, slice_content(stored))
        if self.features.observe(name, dropped, node_uid=self._node_uid):
            with self._cond:
                self._version += 1
                self._cond.notify_all()

    # -- watch --------------------------------------------------------------------------------------
    def _watch_loop(self) -> None:
        """Watch from the last LIST's resourceVersion; every watch that ends early waits its step."""
        while True:
            with self._cond:
                while not self._loops.stopping and not self._list_rv:
                    self._cond.wait(1.0)
                if self._loops.stopping:
                    return
                rv = self._list_rv
            timeout = watch_timeout_seconds(self._watch_timeout, self._rng)
            opened = time.monotonic()
            error: KubeError | None = None
            try:
                watch = self._api.watch_resource_slices(
                    field_selector=self._selector, resource_version=rv, timeout_seconds=timeout
                )
                with self._cond:
                    self._resync_at = float("inf")  # the watch keeps the view true from here
                    self._loops.opened(watch)
                for kind, obj in watch:
                    self._on_event(kind, obj)
            except KubeError as err:
                error = err
            delay = self._watch_backoff.watch_ended(time.monotonic() - opened, timeout, error)
            if delay > 0:
                self._watch_failed(error, delay)

    def _watch_failed(self, error: KubeError | None, delay: float) -> None:
        """Count a watch that ended early, keep the view true by LISTs, wait ``delay`` seconds.

        A 410 (history gone) drops the resourceVersion after the wait: the sync loop LISTs
        again and the next watch starts from that LIST, once per backoff step.
        """
        with self._cond:
            self._loops.closed()
            if self._loops.stopping:
                return
            if self._resync_at == float("inf"):
                self._resync_at = self._next_resync()
            self.stats.errors[f"watch_{error_kind(error)}" if error else "watch_ended_early"] += 1
            self._loops.wait(delay)  # other events wake the condition too: it waits out the step
            if error is not None and error.status == 410:
                self._list_rv = ""
                self._version += 1
                self._cond.notify_all()
        if error is not None:
            _log.info("slice watch failed", error=str(error), retry_in=round(delay, 2), node=self.node_name)

    def _on_event(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = object_or_empty(obj.get("metadata"))
        name, rv = str(meta.get("name", "")), str(meta.get("resourceVersion", ""))
        with self._cond:
            if rv:
                self._list_rv = rv
            if kind == "BOOKMARK":
                return
            sent = self._sent.get(name)
            if sent is not None and sent == ("" if kind == "DELETED" else slice_content(obj)):
                return  # the echo of our own write
            if kind == "DELETED":
                self.stats.foreign_deletions += 1
            _log.info("foreign change to our slice", slice=name, change=kind, node=self.node_name)
            self._version += 1
            self._retry_at = 0.0
            self._cond.notify_all()
