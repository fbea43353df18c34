"""Driver logic behind :class:`driver.plugin.DriverPlugin`: prepare and unprepare claims."""

from __future__ import annotations

from driver.claims.driver import ClaimsDriver, InventoryProvider, PinPlanner, StatusWriter

__all__ = ["ClaimsDriver", "InventoryProvider", "PinPlanner", "StatusWriter"]
