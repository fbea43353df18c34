"""The claim lookup of the pinning backends, built from the driver's own journal entries.

The NRI plugin (and the hook's env mode) must decide from the driver's record, never from what a
container says about itself: :func:`claim_binding` turns a journal entry into the
:class:`~driver.pinning.types.ClaimBinding` they check a container's pod against and take the
CPUs and memory nodes from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from driver.pinning.planner import mems_for_devices
from driver.pinning.types import ClaimBinding

if TYPE_CHECKING:
    from driver.inventory.model import Inventory
    from driver.state.journal import JournalEntry

__all__ = ["binding_lookup", "claim_binding"]


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
