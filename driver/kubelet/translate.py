"""Pure translation between the kubelet's protobuf messages and the ``driver.plugin`` types.

The DRA service comes in two versions whose messages are the same field for field, but for
``Device.share_id``, which only v1 has: :class:`DraApi` names one version's generated modules and
the response builders take it, so there is one builder per response, not one per version.

Nothing here does I/O. The protocol-level checks reject what no real kubelet sends (empty or
oversized fields, names that are not Kubernetes names, duplicate UIDs, oversized batches) before
the driver sees it; each rejected claim gets its own error entry so the rest of the request still
goes through. The response builders guarantee one map entry per requested claim UID.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, TypeVar

from driver._proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1alpha1_pb2,
)
from driver.names import (
    MAX_CLAIM_UID,
    MAX_LABEL,
    MAX_SUBDOMAIN,
    base_request_name,
    is_claim_uid,
    is_dns_label,
    is_dns_subdomain,
)
from driver.plugin import ClaimRef, DeviceHealth, HealthState, PreparedDevice, PrepareResult

__all__ = [
    "DRA_V1",
    "DRA_V1BETA1",
    "MAX_CLAIMS_PER_REQUEST",
    "MAX_HEALTH_MESSAGE_CHARS",
    "ClaimCheck",
    "DraApi",
    "check_claims",
    "claims_from_proto",
    "complete_errors",
    "complete_results",
    "health_message",
    "health_response_v1",
    "health_response_v1alpha1",
    "health_status_value",
    "prepare_response",
    "resource_id",
    "shorten",
    "unprepare_response",
]

#: a pod's claims for one driver arrive in one call; far more than any pod can reference
MAX_CLAIMS_PER_REQUEST = 256
#: the kubelet truncates longer messages itself; we do it first so the text stays ours
MAX_HEALTH_MESSAGE_CHARS = 1024


_HEALTH_VALUES: dict[HealthState, int] = {
    HealthState.UNKNOWN: health_v1_pb2.UNKNOWN,
    HealthState.HEALTHY: health_v1_pb2.HEALTHY,
    HealthState.UNHEALTHY: health_v1_pb2.UNHEALTHY,
}


_NO_RESULT = "driver returned no result for this claim"


@dataclass(frozen=True, slots=True)
class DraApi:
    """One version of the kubelet's ``DRAPlugin`` service: its generated ``*_pb2`` (messages) and
    ``*_pb2_grpc`` (service) modules; :meth:`of` reads the rest from the messages' descriptor."""

    version: str  # as advertised, without the service: "v1" for "v1.DRAPlugin"
    messages: ModuleType
    services: ModuleType
    #: the full gRPC name it is served under (``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``)
    service: str
    #: whether its ``Device`` has ``share_id`` (v1 only)
    share_id: bool

    @classmethod
    def of(cls, version: str, messages: ModuleType, services: ModuleType) -> DraApi:
        """The version served by the generated module pair ``messages``, ``services``."""
        descriptor = messages.DESCRIPTOR
        device = descriptor.message_types_by_name["Device"]
        service = str(descriptor.services_by_name["DRAPlugin"].full_name)
        return cls(version, messages, services, service, "share_id" in device.fields_by_name)


DRA_V1 = DraApi.of("v1", dra_v1_pb2, dra_v1_pb2_grpc)
DRA_V1BETA1 = DraApi.of("v1beta1", dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)


class _ProtoClaim(Protocol):
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True, slots=True)
class ClaimCheck:
    """Claims fit for the driver, and claim UID -> error for those rejected by the protocol layer."""

    valid: tuple[ClaimRef, ...]
    rejected: Mapping[str, str]


def claims_from_proto(claims: Iterable[_ProtoClaim]) -> list[ClaimRef]:
    """Copy the kubelet's ``Claim`` messages (v1 or v1beta1) into plain references, unchecked."""
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


def shorten(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters (ending in ``...``), for error messages and logs."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _claim_problem(claim: ClaimRef) -> str:
    """Why this claim reference cannot be valid, or "" when it can.

    A valid reference (every real one) is settled by the three full matches, whose defaults are
    the limits below and which fail on "": the per-field reasons are built only for a bad one.
    """
    if is_claim_uid(claim.uid) and is_dns_label(claim.namespace) and is_dns_subdomain(claim.name):
        return ""
    checks = (
        ("uid", claim.uid, MAX_CLAIM_UID, is_claim_uid),
        ("namespace", claim.namespace, MAX_LABEL, is_dns_label),
        ("name", claim.name, MAX_SUBDOMAIN, is_dns_subdomain),
    )
    for field, value, limit, valid in checks:
        if not value:
            return f"invalid claim reference: {field} is empty"
        if len(value) > limit:
            return f"invalid claim reference: {field} is {len(value)} characters long, the limit is {limit}"
        if not valid(value):
            return f"invalid claim reference: {field} {shorten(value)!r} is not a valid Kubernetes {field}"
    return ""


def check_claims(claims: Sequence[ClaimRef]) -> ClaimCheck:
    """Split a request into claims for the driver and per-UID protocol errors."""
    if len(claims) > MAX_CLAIMS_PER_REQUEST:
        reason = f"request carries {len(claims)} claims, more than the limit of {MAX_CLAIMS_PER_REQUEST}"
        return ClaimCheck(valid=(), rejected={c.uid: reason for c in claims})
    counts: dict[str, int] = {}
    for claim in claims:
        counts[claim.uid] = counts.get(claim.uid, 0) + 1
    valid: list[ClaimRef] = []
    rejected: dict[str, str] = {}
    for claim in claims:
        if counts[claim.uid] > 1:
            rejected[claim.uid] = f"claim UID appears {counts[claim.uid]} times in one request"
        elif problem := _claim_problem(claim):
            rejected[claim.uid] = problem
        else:
            valid.append(claim)
    return ClaimCheck(valid=tuple(valid), rejected=rejected)


def _base_names(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(base_request_name(n) for n in names))


def _normalized_device(device: PreparedDevice) -> PreparedDevice:
    """``device`` with its request names made base names, each once; ``device`` itself when they
    are already (a driver's usual answer: then there is nothing to copy)."""
    names = device.request_names
    if type(names) is tuple and (len(names) == 1 and "/" not in names[0]):
        return device  # one base name: the usual answer, checked without building anything
    if type(names) is tuple and names == _base_names(names):
        return device
    return PreparedDevice(
        request_names=_base_names(names),
        pool_name=device.pool_name,
        device_name=device.device_name,
        cdi_device_ids=device.cdi_device_ids,
        share_id=device.share_id,
    )


def _normalize(result: PrepareResult) -> PrepareResult:
    """The result as the response carries it: an error without devices, or the devices with base
    request names. Results are immutable, so one that is already so is returned as it is."""
    if result.error:
        return result if result.devices == () else PrepareResult(error=result.error)
    devices = result.devices
    normalized = tuple(_normalized_device(d) for d in devices)
    if type(devices) is tuple and all(map(operator.is_, normalized, devices)):
        return result
    return PrepareResult(devices=normalized)


def complete_results(
    claims: Sequence[ClaimRef], results: Mapping[str, PrepareResult], rejected: Mapping[str, str]
) -> dict[str, PrepareResult]:
    """One normalized result per requested UID: a forgotten claim becomes an error entry.

    UIDs the driver returned without being asked are dropped: the kubelet treats an unknown UID in
    the response as an error for the whole call.
    """
    out: dict[str, PrepareResult] = {uid: PrepareResult(error=err) for uid, err in rejected.items()}
    for claim in claims:
        result = results.get(claim.uid)
        if result is None:
            out[claim.uid] = PrepareResult(error=_NO_RESULT)
        else:
            out[claim.uid] = _normalize(result)
    return out


def complete_errors(
    claims: Sequence[ClaimRef], errors: Mapping[str, str], rejected: Mapping[str, str]
) -> dict[str, str]:
    """The unprepare twin of :func:`complete_results`: one error text ("" = done) per requested UID."""
    out = dict(rejected)
    for claim in claims:
        error = errors.get(claim.uid)
        out[claim.uid] = _NO_RESULT if error is None else error
    return out


def prepare_response(api: DraApi, results: Mapping[str, PrepareResult]) -> Any:
    """``api``'s ``NodePrepareResourcesResponse``: one entry per UID; ``share_id`` is set only where
    the driver gave one and the version has the field (v1beta1 drops it)."""
    response = api.messages.NodePrepareResourcesResponse()
    share_ids = api.share_id
    for uid, result in results.items():
        entry = response.claims[uid]
        if result.error:
            entry.error = result.error
            continue
        for device in result.devices:
            msg = entry.devices.add()
            msg.request_names.extend(device.request_names)
            msg.pool_name = device.pool_name
            msg.device_name = device.device_name
            msg.cdi_device_ids.extend(device.cdi_device_ids)
            if share_ids and device.share_id is not None:
                msg.share_id = device.share_id
    return response


def unprepare_response(api: DraApi, errors: Mapping[str, str]) -> Any:
    """``api``'s ``NodeUnprepareResourcesResponse``: an entry per UID, empty on success."""
    response = api.messages.NodeUnprepareResourcesResponse()
    for uid, error in errors.items():
        response.claims[uid].error = error  # reading a map key adds the entry
    return response


def health_message(text: str) -> str:
    """At most 1024 characters: longer text becomes its first 1021 characters plus ``...``."""
    return shorten(text, MAX_HEALTH_MESSAGE_CHARS)


def health_status_value(state: HealthState) -> int:
    """The ``HealthStatus`` enum number (the same in v1 and v1alpha1)."""
    return _HEALTH_VALUES[state]


def resource_id(driver_name: str, health: DeviceHealth) -> str:
    """What the kubelet shows as ``resourceID`` in pod status: first CDI ID, else driver/pool/device.

    The health message has no such field; the kubelet derives it. We compute the same string for
    our logs so that an operator can match them with the pod status.
    """
    if health.cdi_device_ids:
        return health.cdi_device_ids[0]
    return f"{driver_name}/{health.pool_name}/{health.device_name}"


class _Addable(Protocol):
    def add(self, **fields: Any) -> object: ...


class _HealthResponse(Protocol):
    @property
    def devices(self) -> _Addable: ...


_Health = TypeVar("_Health", bound=_HealthResponse)


def _fill_health(
    response: _Health,
    identifier: Callable[..., object],
    devices: Sequence[DeviceHealth],
    now: int,
    timeout_seconds: int,
) -> _Health:
    for device in devices:
        response.devices.add(
            device=identifier(pool_name=device.pool_name, device_name=device.device_name),
            health=health_status_value(device.state),
            last_updated_time=now,
            health_check_timeout_seconds=timeout_seconds,
            message=health_message(device.reason),
        )
    return response


def health_response_v1(
    devices: Sequence[DeviceHealth], now: int, timeout_seconds: int = 0
) -> health_v1_pb2.NodeWatchResourcesResponse:
    """A full v1 health report stamped ``now`` (unix seconds); timeout 0 = the kubelet default."""
    response = health_v1_pb2.NodeWatchResourcesResponse()
    return _fill_health(response, health_v1_pb2.DeviceIdentifier, devices, now, timeout_seconds)


def health_response_v1alpha1(
    devices: Sequence[DeviceHealth], now: int, timeout_seconds: int = 0
) -> health_v1alpha1_pb2.NodeWatchResourcesResponse:
    """The same report for the v1alpha1 service (field for field identical to v1)."""
    response = health_v1alpha1_pb2.NodeWatchResourcesResponse()
    return _fill_health(response, health_v1alpha1_pb2.DeviceIdentifier, devices, now, timeout_seconds)
