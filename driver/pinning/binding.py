"""The claim lookup of the pinning backends, built from the driver's own journal entries.

The NRI plugin (and the hook's env mode) must decide from the driver's record, never from what a
container says about itself: :func:`claim_binding` turns a journal entry into the
:class:`~driver.pinning.types.ClaimBinding` they check a container's pod against and take the
CPUs and memory nodes from, and :func:`bind` is that check, the one rule both backends apply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from driver.errors import PinningError
from driver.pinning.planner import mems_for_devices
from driver.pinning.types import ClaimBinding, CpuAssignment, CpuMode, format_cpulist

if TYPE_CHECKING:
    from driver.inventory.model import Inventory
    from driver.state.journal import JournalEntry

__all__ = ["bind", "binding_lookup", "claim_binding"]


def claim_binding(entry: JournalEntry, inventory: Inventory | None = None) -> ClaimBinding:
    """The binding of one journaled claim.

    A claim without CPU assignments still gets ``cpuset.mems`` (its CDI spec carries the NUMA
    nodes of its GPUs and NICs); those nodes are worked out again here from the journaled device
    names, as the prepare did, because the entry stores devices, not nodes.
    """
    mems: frozenset[int] = frozenset()
    if entry.pinning is None and inventory is not None:
        mems = mems_for_devices(inventory, (d.device_name for d in entry.devices))
    return ClaimBinding(
        claim_uid=entry.uid,
        namespace=entry.namespace,
        name=entry.name,
        pods=None if entry.reserved_pods is None else frozenset(entry.reserved_pods),
        pinning=entry.pinning,
        mems=mems,
    )


def binding_lookup(
    entry: Callable[[str], JournalEntry | None], inventory: Callable[[], Inventory]
) -> Callable[[str], ClaimBinding | None]:
    """A ``ClaimLookup`` over a journal read model (``PreparedIndex.entry``) and the inventory."""

    def lookup(claim_uid: str) -> ClaimBinding | None:
        found = entry(claim_uid)
        return None if found is None else claim_binding(found, inventory())

    return lookup


def bind(
    binding: ClaimBinding, *, request: str, pod_uid: str, pod_namespace: str, who: str
) -> CpuAssignment | None:
    """What a container that names ``binding``'s claim (and ``request``) is pinned to.

    * its pod must be one the claim was reserved for (and in the claim's namespace), else a
      :class:`PinningError` naming claim and pod: the container is refused. An entry of an older
      numadra (``pods`` None) binds by the claim UID alone;
    * a claim without CPUs grants nothing worth forging (memory nodes only): a container of
      another pod gets None, "handled as a container without a claim", so a GPU claim the
      kubelet prepared once for one pod and shares with a later one still starts there;
    * the CPUs and nodes returned are the record's, for the named request: an unknown request is
      refused. ``who`` describes the container for the error texts.
    """
    bound = binding.pods is None or (
        pod_uid in binding.pods and (not pod_namespace or pod_namespace == binding.namespace)
    )
    if not bound:
        if binding.pinning is None:
            return None
        reserved = ", ".join(f"pod uid {p}" for p in sorted(binding.pods or ())) or "no pod"
        raise PinningError(
            f"{who} carries the pinning marker of claim {binding.namespace}/{binding.name} "
            f"(uid {binding.claim_uid}), which is reserved for {reserved}, not for this pod: "
            "refusing it (a claim's CPUs are pinned only for the pods that hold the claim)"
        )
    if binding.pinning is None:
        if not binding.mems:
            return None
        return CpuAssignment(request, CpuMode.EXCLUSIVE, frozenset(), binding.mems)
    assignment = binding.assignment(request)
    if assignment is None:
        have = ", ".join(a.request for a in binding.pinning.assignments)
        raise PinningError(
            f"{who}: claim {binding.claim_uid} has no CPU assignment for request "
            f"{request or '<none>'!r} named by its marker (it has: {have}; "
            f"CPUs {format_cpulist(binding.pinning.cpus)})"
        )
    return assignment
