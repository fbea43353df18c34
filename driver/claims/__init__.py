"""Driver logic behind :class:`driver.plugin.DriverPlugin`: prepare and unprepare claims.

Pure driver logic (selection, config, planning, CDI, metadata, journal) on claims the kubelet layer
(:mod:`driver.kubelet.claims`) has read and checked; nothing here reads claims from the apiserver
on the call path or takes the cross-process lock.
"""

from __future__ import annotations

from driver.claims.driver import ClaimsDriver, InventoryProvider
from driver.claims.parts import NoClaimStatus, PinPlanner, StatusWriter, claims_journal

__all__ = [
    "ClaimsDriver",
    "InventoryProvider",
    "NoClaimStatus",
    "PinPlanner",
    "StatusWriter",
    "claims_journal",
]
