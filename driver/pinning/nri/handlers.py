"""What the NRI plugin answers, as plain functions of NRI messages and the plugin's bookkeeping.

No sockets here: :class:`PinningHandlers` turns each NRI request into its response, so the
decisions can be tested without a runtime, and the transport (``plugin.py``) stays dumb.

* A container is ours when its env (CDI edits are applied before NRI sees it) carries the
  marker ``NUMADRA_CPUS`` (and usually ``NUMADRA_MEMS``), or when the driver registered an
  explicit assignment for its id. Ours get ``linux.resources.cpu.cpus`` / ``.mems``. Other
  containers get an empty adjustment, unless a **node shared pool** is configured (opt-in): then
  they are confined to it (online CPUs minus reserved minus claimed), which is what makes claim
  CPUs exclusive against pods without a claim. When the pool shrinks because a new claim took
  CPUs, the next CreateContainer of a claim container carries updates that move the others off;
  an empty pool refuses non-claim containers (an empty cpuset would mean "all CPUs").
* Fail closed: a malformed marker, or (when a claim lookup is configured) a marker that names an
  unknown claim or CPUs outside that claim, is an error, so the runtime refuses the container
  instead of running it unpinned.
* ``Synchronize`` rebuilds the bookkeeping from the containers the runtime reports and returns
  updates for those whose cpuset drifted from their marker or from the node shared pool (the
  restart-recovery path).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from driver._proto.nri import api_pb2 as nri
from driver.errors import PinningError
from driver.log import get_logger
from driver.pinning.types import (
    ENV_CLAIM_UID,
    ENV_CPU_MODE,
    ENV_CPUS,
    ENV_MEMS,
    ENV_REQUEST,
    ClaimPinning,
    CpuAssignment,
    CpuMode,
    env_markers,
    format_cpulist,
    parse_cpulist,
)

__all__ = [
    "EVENTS",
    "ClaimLookup",
    "Marker",
    "PinningHandlers",
    "SharedPool",
    "TrackedContainer",
    "marker_from_env",
]

#: CreateContainer, UpdateContainer, StopContainer, RemoveContainer
EVENTS = (
    (1 << (nri.CREATE_CONTAINER - 1))
    | (1 << (nri.UPDATE_CONTAINER - 1))
    | (1 << (nri.STOP_CONTAINER - 1))
    | (1 << (nri.REMOVE_CONTAINER - 1))
)

#: claim UID -> the pinning the driver prepared for it (None when unknown)
ClaimLookup = Callable[[str], ClaimPinning | None]
#: the CPUs containers without a claim may use now (online - reserved - claimed)
SharedPool = Callable[[], frozenset[int]]

_log = get_logger("pinning.nri")


@dataclass(frozen=True, slots=True)
class Marker:
    """The pinning a container carries in its env."""

    cpus: frozenset[int]
    mems: frozenset[int]
    claim_uid: str = ""
    request: str = ""
    mode: CpuMode = CpuMode.EXCLUSIVE


@dataclass(frozen=True, slots=True)
class TrackedContainer:
    """Bookkeeping of one pinned container."""

    container_id: str
    name: str
    marker: Marker
    stopped: bool = False


def marker_from_env(env: Iterable[str]) -> Marker | None:
    """The marker in a container env ("KEY=value" strings), None when it has none."""
    values = env_markers(env)
    if ENV_CPUS not in values and ENV_MEMS not in values:
        return None
    try:
        cpus = parse_cpulist(values.get(ENV_CPUS, ""))
        mems = parse_cpulist(values.get(ENV_MEMS, ""))
    except ValueError as exc:
        raise PinningError(f"malformed pinning marker {ENV_CPUS}/{ENV_MEMS}: {exc}") from exc
    try:
        mode = CpuMode(values.get(ENV_CPU_MODE, CpuMode.EXCLUSIVE.value))
    except ValueError as exc:
        raise PinningError(f"malformed pinning marker {ENV_CPU_MODE}={values[ENV_CPU_MODE]!r}") from exc
    if not cpus and not mems:
        raise PinningError(f"empty pinning marker {ENV_CPUS}/{ENV_MEMS}: an empty cpuset would not pin")
    return Marker(cpus, mems, values.get(ENV_CLAIM_UID, ""), values.get(ENV_REQUEST, ""), mode)


def _resources(marker: Marker) -> nri.LinuxResources:
    cpu = nri.LinuxCPU(cpus=format_cpulist(marker.cpus), mems=format_cpulist(marker.mems))
    return nri.LinuxResources(cpu=cpu)


def _update(container_id: str, marker: Marker) -> nri.ContainerUpdate:
    return nri.ContainerUpdate(
        container_id=container_id, linux=nri.LinuxContainerUpdate(resources=_resources(marker))
    )


def _pool_marker(pool: frozenset[int]) -> Marker:
    """The node shared pool expressed as a marker (CPUs only: memory stays unrestricted)."""
    return Marker(cpus=pool, mems=frozenset(), mode=CpuMode.SHARED)


class PinningHandlers:
    """NRI request -> response for CPU/memory pinning (see the module docstring)."""

    def __init__(
        self, claim_lookup: ClaimLookup | None = None, node_shared_pool: SharedPool | None = None
    ) -> None:
        self._lookup = claim_lookup
        self._pool = node_shared_pool
        self._lock = threading.Lock()
        self._containers: dict[str, TrackedContainer] = {}
        self._others: dict[str, frozenset[int]] = {}  # containers confined to the node pool
        self._expected: dict[str, Marker] = {}
        self._pending_sync: list[nri.Container] = []

    # -- bookkeeping visible to the driver ------------------------------------------------------

    def containers(self) -> dict[str, TrackedContainer]:
        """A snapshot of the pinned containers, by container id."""
        with self._lock:
            return dict(self._containers)

    def expect(self, container_id: str, assignment: CpuAssignment) -> None:
        """Pin ``container_id`` to ``assignment`` even without a marker (explicit backend apply)."""
        marker = Marker(assignment.cpus, assignment.mems, request=assignment.request, mode=assignment.mode)
        with self._lock:
            self._expected[container_id] = marker

    def forget(self, container_id: str) -> None:
        """Drop an explicit assignment and the container's bookkeeping."""
        with self._lock:
            self._expected.pop(container_id, None)
            self._containers.pop(container_id, None)

    # -- NRI requests ---------------------------------------------------------------------------

    def configure(self, req: nri.ConfigureRequest) -> nri.ConfigureResponse:
        """Subscribe to the container events pinning needs."""
        _log.info(
            "configured by runtime",
            runtime=req.runtime_name,
            runtime_version=req.runtime_version,
            nri_version=req.NRI_version,
            request_timeout_ms=req.request_timeout,
        )
        return nri.ConfigureResponse(events=EVENTS)

    def synchronize(self, req: nri.SynchronizeRequest) -> nri.SynchronizeResponse:
        """Rebuild the bookkeeping from every container; re-pin drifted ones (paged by ``more``)."""
        with self._lock:
            self._pending_sync.extend(req.containers)
            if req.more:
                return nri.SynchronizeResponse(more=True)
            containers, self._pending_sync = self._pending_sync, []
        rebuilt: dict[str, TrackedContainer] = {}
        others: dict[str, frozenset[int]] = {}
        updates: list[nri.ContainerUpdate] = []
        pool = self._pool() if self._pool is not None else frozenset()
        for ctr in containers:
            try:
                marker = self._marker(ctr)
            except PinningError as exc:
                _log.error("container with a bad pinning marker left alone", container=ctr.id, error=str(exc))
                continue
            if marker is None:
                if pool and ctr.state != nri.CONTAINER_STOPPED:
                    others[ctr.id] = pool
                    if ctr.linux.resources.cpu.cpus != format_cpulist(pool):
                        updates.append(_update(ctr.id, _pool_marker(pool)))
                continue
            rebuilt[ctr.id] = TrackedContainer(
                ctr.id, ctr.name, marker, stopped=ctr.state == nri.CONTAINER_STOPPED
            )
            current = ctr.linux.resources.cpu
            if current.cpus != format_cpulist(marker.cpus) or (
                marker.mems and current.mems != format_cpulist(marker.mems)
            ):
                updates.append(_update(ctr.id, marker))
        with self._lock:
            self._containers = rebuilt
            self._others = others
        _log.info(
            "synchronized",
            pinned=len(rebuilt),
            shared=len(others),
            repinned=len(updates),
            seen=len(containers),
        )
        return nri.SynchronizeResponse(update=updates)

    def create_container(self, req: nri.CreateContainerRequest) -> nri.CreateContainerResponse:
        """Pin a container carrying our marker; confine others to the node shared pool if configured."""
        ctr = req.container
        marker = self._marker(ctr)
        if marker is None:
            return self._create_other(ctr)
        with self._lock:
            self._containers[ctr.id] = TrackedContainer(ctr.id, ctr.name, marker)
        _log.info(
            "container pinned",
            claim_uid=marker.claim_uid,
            request=marker.request,
            container=ctr.id,
            cpus=format_cpulist(marker.cpus),
            mems=format_cpulist(marker.mems),
        )
        adjust = nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=_resources(marker)))
        return nri.CreateContainerResponse(adjust=adjust, update=self._shrink_others())

    def _create_other(self, ctr: nri.Container) -> nri.CreateContainerResponse:
        """A container without a claim: nothing, or the node shared pool (never an empty one)."""
        if self._pool is None:
            return nri.CreateContainerResponse()
        pool = self._pool()
        if not pool:
            raise PinningError(
                f"node shared pool is empty (every CPU is reserved or claimed): refusing to start "
                f"container {ctr.name or ctr.id} without a claim, it would run on every CPU"
            )
        with self._lock:
            self._others[ctr.id] = pool
        adjust = nri.ContainerAdjustment(
            linux=nri.LinuxContainerAdjustment(resources=_resources(_pool_marker(pool)))
        )
        return nri.CreateContainerResponse(adjust=adjust)

    def _shrink_others(self) -> list[nri.ContainerUpdate]:
        """Updates moving containers without a claim onto the current pool (it may have shrunk)."""
        if self._pool is None:
            return []
        pool = self._pool()
        if not pool:
            _log.error("node shared pool is empty; containers without a claim keep their CPUs")
            return []
        with self._lock:
            stale = sorted(cid for cid, cpus in self._others.items() if cpus != pool)
            for cid in stale:
                self._others[cid] = pool
        return [_update(cid, _pool_marker(pool)) for cid in stale]

    def update_container(self, req: nri.UpdateContainerRequest) -> nri.UpdateContainerResponse:
        """Keep our pinning when the kubelet or another plugin updates the container's resources."""
        marker = self._marker(req.container)
        if marker is None:
            return nri.UpdateContainerResponse()
        cpu = req.linux_resources.cpu
        if cpu.cpus == format_cpulist(marker.cpus) and (
            not marker.mems or cpu.mems == format_cpulist(marker.mems)
        ):
            return nri.UpdateContainerResponse()
        return nri.UpdateContainerResponse(update=[_update(req.container.id, marker)])

    def stop_container(self, req: nri.StopContainerRequest) -> nri.StopContainerResponse:
        """Bookkeeping only: CPUs stay with the claim until unprepare, so restarts find them."""
        with self._lock:
            tracked = self._containers.get(req.container.id)
            if tracked is not None:
                self._containers[tracked.container_id] = TrackedContainer(
                    tracked.container_id, tracked.name, tracked.marker, stopped=True
                )
        return nri.StopContainerResponse()

    def remove_container(self, req: nri.RemoveContainerRequest) -> nri.RemoveContainerResponse:
        """Forget a removed container."""
        with self._lock:
            self._containers.pop(req.container.id, None)
            self._expected.pop(req.container.id, None)
            self._others.pop(req.container.id, None)
        return nri.RemoveContainerResponse()

    # -- helpers --------------------------------------------------------------------------------

    def _marker(self, ctr: nri.Container) -> Marker | None:
        """The container's marker, checked against the prepared claim when a lookup is set."""
        with self._lock:
            expected = self._expected.get(ctr.id)
        if expected is not None:
            return expected
        marker = marker_from_env(ctr.env)
        if marker is None or self._lookup is None:
            return marker
        pinning = self._lookup(marker.claim_uid) if marker.claim_uid else None
        if pinning is None:
            raise PinningError(
                f"container {ctr.name or ctr.id} carries a pinning marker for claim "
                f"{marker.claim_uid or '<none>'} that this driver has not prepared"
            )
        if not marker.cpus <= pinning.cpus:
            raise PinningError(
                f"container {ctr.name or ctr.id}: marker CPUs {format_cpulist(marker.cpus)} are not "
                f"CPUs of claim {marker.claim_uid} ({format_cpulist(pinning.cpus)})"
            )
        return marker
