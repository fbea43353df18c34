"""The seam between the kubelet protocol layer (``driver/kubelet``) and the driver logic.

``driver/kubelet`` owns gRPC, sockets and registration, reads the claims the kubelet names from
the apiserver, checks them against the references, holds the cross-process lock around each driver
call and knows nothing about GPUs; it calls an object satisfying :class:`DriverPlugin` with the
fetched claims (:class:`Claim`). ``driver/claims`` implements it and neither imports protobuf nor
reads the apiserver. This mirrors the Go ``kubeletplugin.DRAPlugin`` interface, whose
``PrepareResourceClaims`` also receives claim objects and ``UnprepareResourceClaims`` references.

Contract of :class:`DriverPlugin` (every implementation must keep it):

* Both calls are idempotent: the kubelet calls again after its own restarts, and a prepare may be
  repeated after a restart of the driver; it must return the same devices and CDI IDs.
* Unprepare may run in another process than the prepare (rolling update): keep state on disk.
* Every claim in the request gets an entry in the returned mapping, keyed by claim UID; one bad
  claim never fails the others. A raised exception means an infrastructure failure of the whole
  call (the kubelet then retries everything).
* Unpreparing an unknown or already unprepared claim succeeds (empty error).
* A claim handed to ``prepare_claims`` was read from the apiserver for this call and checked by the
  kubelet layer: its UID is the reference's and it has ``status.allocation``; references are
  distinct by UID and carry valid names. Everything about devices is the driver's to check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Claim",
    "ClaimRef",
    "DeviceHealth",
    "DriverPlugin",
    "HealthSource",
    "HealthState",
    "PrepareResult",
    "PreparedDevice",
    "ReadsAhead",
    "describe_claim",
    "read_ahead_of",
]


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """What the kubelet tells us about a claim: a reference only; the claim itself is fetched."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim to prepare: the kubelet's reference and the object the kubelet layer read for it.

    ``obj`` is the apiserver's ResourceClaim JSON, whose UID equals ``ref.uid`` and which carries
    ``status.allocation`` (the kubelet layer answers the claim's error otherwise).
    """

    ref: ClaimRef
    obj: Mapping[str, Any]


def describe_claim(ref: ClaimRef) -> str:
    """How every error text names a claim: namespace/name and UID."""
    return f"claim {ref.namespace}/{ref.name} (uid {ref.uid})"


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device made available for a claim, as the kubelet's ``Device`` message carries it."""

    request_names: tuple[str, ...]  # base request names ("gpu/high-mem" -> "gpu"); empty = all
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None  # echoes the allocation's shareID (v1 only on the wire)


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """Outcome for one claim: either devices, or a non-empty error (then devices are ignored)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""

    @property
    def ok(self) -> bool:
        """True when the claim was prepared."""
        return not self.error


@runtime_checkable
class DriverPlugin(Protocol):
    """What the kubelet layer needs from the driver logic (see the module docstring)."""

    def prepare_claims(self, claims: Sequence[Claim]) -> Mapping[str, PrepareResult]:
        """Prepare every fetched claim; return one result per claim UID."""
        ...

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Unprepare every claim; return claim UID -> error message ("" on success)."""
        ...

    def handle_error(self, err: BaseException, msg: str) -> None:
        """Background failure (publishing, health): log and go on if recoverable, else stop."""
        ...


@runtime_checkable
class ReadsAhead(Protocol):
    """A plugin with work for a prepare that needs no lock: the kubelet layer calls
    :meth:`read_ahead` with the call's claims before it takes the cross-process lock, so the
    lock's holder finds that work done (files others wrote, parsed once per version)."""

    def read_ahead(self, claims: Sequence[Claim]) -> None:
        """Do what the prepare of ``claims`` will need and no lock guards (best effort: never raises)."""
        ...


def read_ahead_of(plugin: object) -> Callable[[Sequence[Claim]], None] | None:
    """``plugin.read_ahead`` when ``plugin`` is a :class:`ReadsAhead`, else None.

    The same rule as ``isinstance(plugin, ReadsAhead)`` (the method is there and not None), without
    the runtime-checkable protocol's class checks, a slow way to ask on every prepare.
    """
    method: Callable[[Sequence[Claim]], None] | None = getattr(plugin, "read_ahead", None)
    return method


class HealthState(StrEnum):
    """Per-device health, as the kubelet's health API and the taints both express it."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    """Health of one published device, with a short reason for humans and taint values."""

    pool_name: str
    device_name: str
    state: HealthState
    reason: str = ""
    #: CDI ID used as resourceID by the health stream when the device is prepared (else empty)
    cdi_device_ids: tuple[str, ...] = field(default=())


@runtime_checkable
class HealthSource(Protocol):
    """Where the kubelet layer's health stream reads from."""

    def health_snapshot(self) -> Sequence[DeviceHealth]:
        """Current health of every published device."""
        ...

    def wait_for_change(self, timeout: float) -> bool:
        """Block until health changed (True) or ``timeout`` seconds passed (False)."""
        ...
