"""The one current :class:`~driver.inventory.model.Inventory` of a running driver, and who follows it.

An inventory is immutable; a host that changed (hot-plug, a rescan) gives a new one. Components
that only read it now and then (the claims logic, the CPU planner, the metrics) ask
:meth:`InventoryHolder.current` each time; components that keep state derived from it (the health
model, the published slices, the claim status writer) subscribe and are handed each new one, in
the order they subscribed. A subscriber that fails is logged and the others still get the new
inventory: a slice that cannot be built must not keep the health model on the old devices.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from driver.errors import DriverError
from driver.inventory.model import Inventory
from driver.log import get_logger

__all__ = ["InventoryHolder", "Subscriber"]

Subscriber = Callable[[Inventory], object]

_log = get_logger("inventory.holder")


class InventoryHolder:
    """Discovers the host once when built; :meth:`rescan` replaces the inventory when it changed."""

    def __init__(self, discover: Callable[[], Inventory]) -> None:
        self._discover = discover
        self._current = discover()
        self._lock = threading.Lock()  # one rescan at a time: the newest inventory stays current
        self._subscribers: list[tuple[str, Subscriber]] = []

    def current(self) -> Inventory:
        """The inventory as of the last discovery that found a change."""
        return self._current

    def subscribe(self, name: str, callback: Subscriber) -> None:
        """Call ``callback(inventory)`` with every new inventory (``name`` says who, in logs)."""
        self._subscribers.append((name, callback))

    def rescan(self) -> bool:
        """Discover the host again; when it changed, hand the new inventory to every subscriber."""
        with self._lock:  # held while handing it out too: no subscriber sees an older one last
            fresh = self._discover()
            if fresh == self._current:
                return False
            self._current = fresh
            _log.info(
                "inventory changed",
                gpus=len(fresh.gpus),
                nics=len(fresh.nics),
                numa_nodes=len(fresh.numa_nodes),
            )
            for name, callback in list(self._subscribers):
                try:
                    callback(fresh)
                except DriverError as exc:
                    _log.error("cannot follow the new inventory", subscriber=name, error=str(exc))
                except Exception:
                    _log.exception("cannot follow the new inventory", subscriber=name)
        return True
