"""Keep :mod:`driver.slices.ownership` current: other drivers' slices of this node, and its Node.

Two background threads, each paced by the driver's :class:`~driver.kube.backoff.RetryPolicy`:

* the slices thread LISTs the ResourceSlices of this node (``fieldSelector spec.nodeName=<node>``,
  every driver; ours are skipped by the pure module) and WATCHes from the LIST's resourceVersion,
  as the publisher does for its own: a timeout drawn from ``[watch_timeout, 2 * watch_timeout)``,
  a watch that ends early or a 410 waits its backoff step before the next LIST, so a broken proxy
  costs a bounded number of requests;
* the node thread GETs the Node every ``node_interval`` seconds, drawn in ``[node_interval,
  2 * node_interval)`` like the watch timeouts, so a fleet's reads are a flat rate (docs/scale.md):
  its ``status.capacity`` says which device plugins run here. A GET, not a watch: the driver's
  RBAC has ``get`` on nodes only, and device plugins register rarely, so a plugin that appears
  after numadra is heeded within ``2 * node_interval`` (a DRA driver's slice at once).

Every change recomputes the ownership and, when the withheld devices changed, tells each listener
(the publisher rebuilds without them; the reporter says so; prepare reads :meth:`withheld`). A
device comes back the same way: the other driver's slice is deleted, the watch says so, the
publisher republishes it; no restart.

Until the first LIST has been answered the owners are unknown, and :attr:`known` stays unset: the
publisher waits for it before its first write, so numadra never publishes a device another driver
already holds, even when both start together. A LIST that is forbidden (RBAC without list on
resourceslices) or not served counts as "no other driver", said once in the log: waiting for ever
would leave the node without any slice. The LIST is then tried again every ``refused_interval``
(stretched by up to half of it), not at the retry policy's pace.

Bounded work: at most ``limit`` (:data:`~driver.slices.ownership.MAX_FOREIGN_DEVICES`) slices of
this node are kept, and each recompute examines at most that many foreign devices; past either
bound a warning says so once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from driver.backoff import RetryPolicy
from driver.errors import KubeError
from driver.inventory.model import Inventory
from driver.kube.client import SliceWatch
from driver.log import get_logger
from driver.pinning.otherdevices import DevicePlaces
from driver.slices.ownership import MAX_FOREIGN_DEVICES, Owner, Ownership, find_owners
from driver.slices.places import device_places
from driver.slices.watchedloops import WatchedLoops, jittered, watch_timeout_seconds  # as the publisher's
from driver.supervise import supervised
from driver.untrusted.values import object_or_empty

__all__ = ["ForeignApi", "ForeignOwners"]

Obj = dict[str, Any]
_log = get_logger("slices.foreign")
#: statuses that will not change by retrying: treated as "no other driver" (module docstring)
_PERMANENT = frozenset({401, 403, 404})


class ForeignApi(Protocol):
    """What the watcher needs from the apiserver (:class:`driver.kube.client.KubeClient` has it)."""

    def get_node(self, name: str) -> Obj: ...
    def list_resource_slices(
        self, *, field_selector: str = "", label_selector: str = ""
    ) -> tuple[list[Obj], str]: ...
    def watch_resource_slices(
        self, *, field_selector: str = "", resource_version: str = "", timeout_seconds: int = 300
    ) -> SliceWatch: ...


class ForeignOwners:
    """The devices of ours that others own on this node, kept current (module docstring). Thread-safe."""

    def __init__(
        self,
        api: ForeignApi,
        *,
        inventory: Callable[[], Inventory],
        node_name: str,
        driver_name: str,
        retry: RetryPolicy | None = None,
        node_interval: float = 300.0,
        watch_timeout: int = 300,
        limit: int = MAX_FOREIGN_DEVICES,
        rng: random.Random | None = None,
        start_jitter: float = 0.0,
        refused_interval: float = 600.0,
    ) -> None:
        self._api = api
        self._inventory = inventory
        self.node_name = node_name
        self.driver_name = driver_name
        self._listeners: list[Callable[[Ownership], None]] = []
        self._rng = rng or random.Random()  # noqa: S311 - spreads load, guards no secret
        policy = self._policy = retry or RetryPolicy()
        self._slice_backoff = policy.backoff(self._rng)
        self._node_backoff = policy.backoff(self._rng)
        self._node_interval = node_interval
        self._watch_timeout = watch_timeout
        self._limit = limit
        self._start_jitter = start_jitter
        self._refused_interval = refused_interval
        self._selector = f"spec.nodeName={node_name}"
        self._lock = threading.Condition()
        #: one recompute and its on_change at a time, so the last one told is the newest
        self._recompute_lock = threading.Lock()
        self._slices: dict[str, Obj] = {}
        self._node: Obj | None = None
        self._ownership = Ownership()
        #: bumped at every change of ``_slices``; the places below are of version ``_places[0]``
        self._version = 0
        self._places: tuple[int, DevicePlaces] = (-1, DevicePlaces())
        self._said: set[str] = set()  # problems and truncation already logged
        #: the two loops, their open watch and their stop (which also ends the backoffs' waits)
        self._loops = WatchedLoops(self._lock, wake=(self._slice_backoff.stop, self._node_backoff.stop))
        #: set once the first LIST was answered (or refused for good): the owners are known
        self.known = threading.Event()

    def add_listener(self, listener: Callable[[Ownership], None]) -> None:
        """``listener`` hears every change of the withheld devices (and the first answer)."""
        self._listeners.append(listener)

    # -- readers ----------------------------------------------------------------------------------
    def withheld(self) -> Mapping[str, Owner]:
        """Device name -> owner, as of the last recompute (empty before the first)."""
        with self._lock:
            return self._ownership.withheld

    def ownership(self) -> Ownership:
        """The last recompute in full."""
        with self._lock:
            return self._ownership

    def device_places(self) -> DevicePlaces:
        """Where the other drivers' devices of this node are (:mod:`driver.slices.places`), from
        the slices kept here: no read of its own. Built when first asked after a change."""
        with self._lock:
            version, built = self._places
            if version == self._version:
                return built
            version, slices = self._version, list(self._slices.values())
        places = device_places(
            slices, node_name=self.node_name, own_driver=self.driver_name, limit=self._limit
        )
        if places.truncated:
            self._say_once("places", "too many other drivers' devices on this node: the rest are not placed")
        with self._lock:
            if version == self._version:
                self._places = (version, places)
        return places

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the slices and node threads; returns at once."""
        # under the supervisor: an exception no loop expects is logged and counted, and the loop
        # runs again after a step of the policy (the watch is dropped; the LIST starts it anew)
        self._loops.start(
            supervised("foreign-slices", self._slices_loop, policy=self._policy),
            supervised("foreign-node", self._node_loop, policy=self._policy),
        )

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both threads."""
        self._loops.stop(timeout)

    def refresh(self, _inventory: Inventory | None = None) -> None:
        """Recompute now (the inventory changed: a new device may be someone else's)."""
        self._recompute()

    # -- one round of each, also for tests --------------------------------------------------------
    def list_once(self) -> str:
        """LIST this node's slices, replace the view, recompute; the LIST's resourceVersion."""
        try:
            items, rv = self._api.list_resource_slices(field_selector=self._selector)
        except KubeError as err:
            if err.status not in _PERMANENT:
                raise
            self._say_once(
                f"list-{err.status}",
                "cannot list other drivers' ResourceSlices: treating this node as having none "
                "(grant list/watch on resourceslices to withhold what they publish)",
                error=str(err),
            )
            items, rv = [], ""
        kept = [o for o in items if isinstance(o, dict)]
        if len(kept) > self._limit:
            self._say_once(
                "slices", "too many ResourceSlices on this node: the rest are not kept", listed=len(kept)
            )
        with self._lock:
            self._slices = {_name(o): o for o in kept[: self._limit]}
            self._version += 1
        first = not self.known.is_set()
        self.known.set()
        self._recompute(tell=first)  # the first answer is news even when nothing is withheld
        return rv

    def read_node_once(self) -> None:
        """GET the Node and recompute (its capacity names the device plugins)."""
        node = self._api.get_node(self.node_name)
        with self._lock:
            self._node = node if isinstance(node, dict) else None
        self._recompute()

    # -- loops -----------------------------------------------------------------------------------
    def _slices_loop(self) -> None:
        self._loops.wait(self._rng.uniform(0.0, self._start_jitter))  # a restarted fleet: no LIST burst
        while self._slice_backoff.wait_turn():
            try:
                rv = self.list_once()
            except KubeError as err:
                delay = self._slice_backoff.failed(err)
                _log.info("foreign slice list failed", error=str(err), retry_in=round(delay, 2))
                continue
            if rv:
                self._watch_from(rv)
            else:  # refused for good (RBAC): look again rarely, a fleet must not LIST in a loop
                self._loops.wait(jittered(self._refused_interval, 0.5, self._rng))
            if self._loops.stopping:
                return

    def _watch_from(self, rv: str) -> None:
        """Follow the watch until it ends; a watch that ended early waits its step."""
        while not self._loops.stopping:
            timeout = watch_timeout_seconds(self._watch_timeout, self._rng)
            opened = time.monotonic()
            error: KubeError | None = None
            try:
                watch = self._api.watch_resource_slices(
                    field_selector=self._selector, resource_version=rv, timeout_seconds=timeout
                )
                self._loops.opened(watch)
                for kind, obj in watch:
                    rv = self._on_event(kind, obj) or rv
            except KubeError as err:
                error = err
            self._loops.closed()
            delay = self._slice_backoff.watch_ended(time.monotonic() - opened, timeout, error)
            if delay > 0 or (error is not None and error.status == 410):
                return  # wait_turn() waits the step, then a fresh LIST
            # a watch that ran its course: renew from the last resourceVersion seen

    def _on_event(self, kind: str, obj: Mapping[str, Any]) -> str:
        rv = str(object_or_empty(obj.get("metadata")).get("resourceVersion", ""))
        if kind == "BOOKMARK":
            return rv
        name = _name(obj)
        with self._lock:
            if kind == "DELETED":
                self._slices.pop(name, None)
            elif kind in ("ADDED", "MODIFIED") and (name in self._slices or len(self._slices) < self._limit):
                self._slices[name] = dict(obj)  # at most ``limit`` slices kept (each has a device or none)
            self._version += 1
        self._recompute()
        return rv

    def _node_loop(self) -> None:
        self._loops.wait(self._rng.uniform(0.0, self._start_jitter))
        while not self._loops.stopping:
            try:
                self.read_node_once()
                self._node_backoff.succeeded()
                wait = jittered(self._node_interval, 1.0, self._rng)
            except KubeError as err:
                wait = self._node_backoff.failed(err)
                _log.info("node read failed", error=str(err), retry_in=round(wait, 2), node=self.node_name)
            self._loops.wait(wait)

    # -- the pure part, and who hears of it -------------------------------------------------------
    def _recompute(self, *, tell: bool = False) -> None:
        with self._recompute_lock:
            self._recompute_locked(tell)

    def _recompute_locked(self, tell: bool) -> None:
        with self._lock:
            slices, node = list(self._slices.values()), self._node
        result = find_owners(
            self._inventory(),
            slices,
            node,
            driver_name=self.driver_name,
            node_name=self.node_name,
            limit=self._limit,
        )
        with self._lock:
            changed = dict(result.withheld) != dict(self._ownership.withheld)
            self._ownership = result
        for problem in result.problems:
            self._say_once(problem, "device plugin capacity ignored", problem=problem)
        if result.truncated:
            self._say_once(
                "truncated",
                "too many foreign devices on this node: the rest are not examined",
                examined=result.examined,
            )
        if (changed or tell) and self.known.is_set():
            for listener in self._listeners:
                listener(result)

    def _say_once(self, key: str, message: str, **keys: Any) -> None:
        with self._lock:
            if key in self._said:
                return
            self._said.add(key)
        _log.warning(message, node=self.node_name, **keys)


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
