"""InventoryHolder: one current inventory; a changed host reaches every subscriber, in order."""

from __future__ import annotations

import pytest

from driver.errors import SliceError
from driver.inventory.holder import InventoryHolder
from driver.inventory.model import Inventory
from tests.unit.inventory.trees import inventory


class _Host:
    """What discovery finds, changed by the test (a hot-plug)."""

    def __init__(self, now: Inventory) -> None:
        self.now = now
        self.discoveries = 0

    def discover(self) -> Inventory:
        self.discoveries += 1
        return self.now


def test_built_from_one_discovery_and_rescan_keeps_an_unchanged_one() -> None:
    """The holder discovers once when built; a rescan that finds the same host changes nothing."""
    host = _Host(inventory("workstation"))
    holder = InventoryHolder(host.discover)
    seen: list[Inventory] = []
    holder.subscribe("test", seen.append)
    assert holder.current() is host.now
    assert host.discoveries == 1
    assert holder.rescan() is False
    assert seen == []


def test_a_changed_host_reaches_every_subscriber_in_order() -> None:
    """Health, claim status and slices follow the same inventory, in the order they subscribed."""
    host = _Host(inventory("workstation"))
    holder = InventoryHolder(host.discover)
    seen: list[tuple[str, Inventory]] = []
    for name in ("health", "status", "slices"):
        holder.subscribe(name, lambda inv, name=name: seen.append((name, inv)))
    host.now = inventory("dgx")
    assert holder.rescan() is True
    assert holder.current() is host.now
    assert seen == [("health", host.now), ("status", host.now), ("slices", host.now)]


@pytest.mark.parametrize(
    "error", [SliceError("too many devices"), RuntimeError("bug")], ids=["driver", "other"]
)
def test_a_failing_subscriber_does_not_keep_the_others_on_the_old_devices(error: Exception) -> None:
    """Slices that cannot be built for the new host are logged; the health model still follows."""
    host = _Host(inventory("workstation"))
    holder = InventoryHolder(host.discover)
    seen: list[Inventory] = []

    def fail(_inventory: Inventory) -> None:
        raise error

    holder.subscribe("slices", fail)
    holder.subscribe("health", seen.append)
    host.now = inventory("dgx")
    assert holder.rescan() is True
    assert seen == [host.now]
