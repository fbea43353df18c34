"""What ``explain`` reports: plain frozen data, rendered as text or JSON by :mod:`render`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "AllocatedDevice",
    "ClaimExplanation",
    "DeviceCheck",
    "PreparedDeviceView",
    "PreparedPinning",
    "PreparedView",
    "Reason",
    "ReasonKind",
    "RequestExplanation",
    "RequestStatus",
    "Verdict",
]


class Verdict(StrEnum):
    """Whether one device could serve one request on its own (before constraints across requests)."""

    ELIGIBLE = "eligible"
    EXCLUDED = "excluded"
    UNKNOWN = "unknown"  # a selector could not be evaluated


class ReasonKind(StrEnum):
    """Why a device cannot (or may not) serve a request; stable values for ``-o json`` users."""

    WRONG_TYPE = "wrong-type"
    CLASS_SELECTOR = "class-selector"
    SELECTOR = "selector"
    CEL_ERROR = "cel-error"
    CANNOT_EVALUATE = "cannot-evaluate"
    UNHEALTHY = "unhealthy"
    TAINTED = "tainted"
    IN_USE = "in-use"
    WITHHELD = "withheld"  # another DRA driver or a device plugin owns it on this node
    CAPACITY = "capacity"
    NUMA_MISMATCH = "numa-mismatch"
    CONSTRAINT = "constraint"


class RequestStatus(StrEnum):
    """Whether this node's devices can satisfy a request."""

    SATISFIABLE = "satisfiable"
    UNSATISFIABLE = "unsatisfiable"
    UNKNOWN = "unknown"  # depends on selectors explain cannot evaluate
    NOT_EVALUATED = "not-evaluated"  # device class of another driver, or unknown class


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason, with the values that led to it (``numaNode is 1, wants 0``)."""

    kind: ReasonKind
    message: str


@dataclass(frozen=True, slots=True)
class DeviceCheck:
    """The verdict on one device for one request."""

    device: str
    type: str
    verdict: Verdict
    reasons: tuple[Reason, ...] = ()
    allocated: bool = False  # the scheduler allocated this device to this request


@dataclass(frozen=True, slots=True)
class RequestExplanation:
    """One request (or one subrequest of a ``firstAvailable`` list)."""

    name: str  # "gpu" or "gpu/high-mem"
    device_class: str
    mode: str  # ExactCount | All
    count: int
    status: RequestStatus
    checks: tuple[DeviceCheck, ...] = ()
    notes: tuple[str, ...] = ()
    subrequests: tuple[RequestExplanation, ...] = ()

    @property
    def eligible(self) -> tuple[str, ...]:
        """Names of the devices that could serve this request."""
        return tuple(c.device for c in self.checks if c.verdict is Verdict.ELIGIBLE)

    def check(self, device: str) -> DeviceCheck | None:
        """The verdict on one device, or None when it was not considered."""
        return next((c for c in self.checks if c.device == device), None)


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of our driver, from the claim's status."""

    request: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class PreparedDeviceView:
    """A device the journal says was prepared for the claim, with its CDI device IDs."""

    device: str
    pool: str
    requests: tuple[str, ...]
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PreparedPinning:
    """CPUs and memory nodes of one request of a prepared claim."""

    request: str
    mode: str
    cpuset: str
    memset: str


@dataclass(frozen=True, slots=True)
class PreparedView:
    """What this node did for a prepared claim (from the journal)."""

    devices: tuple[PreparedDeviceView, ...]
    pinning: tuple[PreparedPinning, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimExplanation:
    """The whole answer for one claim."""

    namespace: str
    name: str
    uid: str
    requests: tuple[RequestExplanation, ...]
    allocated: tuple[AllocatedDevice, ...] = ()
    prepared: PreparedView | None = None
    notes: tuple[str, ...] = field(default=())
