"""The claim lookup of the pinning backends, built from the state layer's read model.

The NRI plugin (and the hook's env mode) must decide from the driver's record, never from what a
container says about itself: :func:`claim_binding` turns a
:class:`~driver.pinning.types.PreparedClaimView` (what ``driver.state.index`` makes of a journal
entry) into the :class:`~driver.pinning.types.ClaimBinding` they check a container's pod against
and take the CPUs and memory nodes from, and :func:`bind` is that check, the one rule both
backends apply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from driver.errors import PinRefusedError
from driver.pinning.failures import REASON_BAD_MARKER, REASON_CONSUMERS_UNKNOWN, REASON_NOT_RESERVED
from driver.pinning.planner import mems_for_devices
from driver.pinning.types import ClaimBinding, CpuAssignment, CpuMode, PreparedClaimView, format_cpulist

if TYPE_CHECKING:
    from driver.inventory.model import Inventory

__all__ = ["bind", "binding_lookup", "claim_binding", "describe_binding"]


def claim_binding(view: PreparedClaimView, inventory: Inventory | None = None) -> ClaimBinding:
    """The binding of one prepared claim.

    A claim without CPU assignments still gets ``cpuset.mems`` (its CDI spec carries the NUMA
    nodes of its GPUs and NICs); those nodes are worked out again here from the recorded device
    names, as the prepare did, because the record stores devices, not nodes. Per request too: a
    container that holds only some of the claim's requests is aligned to their devices' nodes.
    """
    mems: frozenset[int] = frozenset()
    request_mems: dict[str, frozenset[int]] = {}
    if view.pinning is None and inventory is not None:
        mems = mems_for_devices(inventory, view.device_names)
        by_request: dict[str, list[str]] = {}
        for request, device in view.request_devices:
            by_request.setdefault(request, []).append(device)
        request_mems = {r: mems_for_devices(inventory, names) for r, names in by_request.items()}
    return ClaimBinding(
        claim_uid=view.claim_uid,
        namespace=view.namespace,
        name=view.name,
        pods=view.pods,
        pinning=view.pinning,
        mems=mems,
        request_mems=request_mems,
        pod_groups=view.pod_groups,
    )


def binding_lookup(
    view: Callable[[str], PreparedClaimView | None], inventory: Callable[[], Inventory]
) -> Callable[[str], ClaimBinding | None]:
    """A ``ClaimLookup`` over the prepared-claims read model (``PreparedIndex.view``) and the inventory."""

    def lookup(claim_uid: str) -> ClaimBinding | None:
        found = view(claim_uid)
        return None if found is None else claim_binding(found, inventory())

    return lookup


def describe_binding(binding: ClaimBinding) -> str:
    """``claim ns/name (uid U)``, as every refusal names the claim."""
    return f"claim {binding.namespace or '?'}/{binding.name or '?'} (uid {binding.claim_uid})"


def bind(
    binding: ClaimBinding, *, request: str, pod_uid: str, pod_namespace: str, who: str
) -> CpuAssignment | None:
    """What a container that names ``binding``'s claim (and ``request``) is pinned to.

    * its pod must be a known consumer of the claim (and in the claim's namespace), else a
      :class:`~driver.errors.PinRefusedError` naming claim and pod: the container is refused.
      A PodGroup of the claim binds no pod by itself: a pod of it is a known consumer once the
      apiserver confirmed its membership (``driver.pinning.consumers``), which the caller asks
      for before; the refusal names the groups;
      Consumers not known at all (``pods`` None: an entry rebuilt from files, or journaled before
      pods were recorded) bind no pod: the caller learns them first (``driver.pinning.consumers``),
      and without them the container is refused, never pinned on the claim's UID alone;
    * a claim without CPUs grants nothing worth forging (memory nodes only): a container of a pod
      that is not a known consumer gets None, "handled as a container without a claim";
    * the CPUs and nodes returned are the record's, for the named request: an unknown request is
      refused. ``who`` describes the container for the error texts.
    """
    if not binding.reserved_for(pod_uid, pod_namespace):
        if binding.pinning is None:
            return None
        claim = describe_binding(binding)
        if binding.pods is None and binding.in_namespace(pod_namespace):
            raise PinRefusedError(
                f"{who} carries the pinning marker of {claim}, whose consumers numadra has not "
                "learned (its record was rebuilt from the files on disk, or written before pods "
                "were recorded): refusing it until the claim's status.reservedFor shows its pod",
                reason=REASON_CONSUMERS_UNKNOWN,
            )
        if not binding.in_namespace(pod_namespace):
            reserved = f"a claim of namespace {binding.namespace}"
        else:
            holders = [f"pod uid {p}" for p in sorted(binding.pods or ())]
            holders += [f"PodGroup {g.name} (uid {g.uid})" for g in sorted(binding.pod_groups)]
            reserved = f"reserved for {', '.join(holders) or 'no pod'}"
        raise PinRefusedError(
            f"{who} carries the pinning marker of {claim}, which is {reserved}, not for this pod: "
            "refusing it (a claim's CPUs are pinned only for the pods that hold the claim)",
            reason=REASON_NOT_RESERVED,
        )
    if binding.pinning is None:
        if not binding.mems:
            return None
        return CpuAssignment(request, CpuMode.EXCLUSIVE, frozenset(), binding.mems)
    assignment = binding.assignment(request)
    if assignment is None:
        have = ", ".join(a.request for a in binding.pinning.assignments)
        raise PinRefusedError(
            f"{who}: claim {binding.claim_uid} has no CPU assignment for request "
            f"{request or '<none>'!r} named by its marker (it has: {have}; "
            f"CPUs {format_cpulist(binding.pinning.cpus)})",
            reason=REASON_BAD_MARKER,
        )
    return assignment
