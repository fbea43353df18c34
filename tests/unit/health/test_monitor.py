"""HealthMonitor state machine (hysteresis, change notification) with a scripted signal reader."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from driver.health.monitor import HealthMonitor
from driver.health.signals import Reading, SignalReader
from driver.inventory.model import Inventory, InventoryDevice, NumaNode
from driver.plugin import DeviceHealth, HealthSource, HealthState

OK = Reading(HealthState.HEALTHY)
BAD = Reading(HealthState.UNHEALTHY, "NoCarrier")
UNKNOWN = Reading(HealthState.UNKNOWN, "AdminDown")
INVENTORY = Inventory(numa_nodes=(NumaNode(id=0, cpus=(0,), memory_bytes=1),))


class ScriptedReader(SignalReader):
    """Returns the readings of a script, one per poll (the boundary to sysfs, replaced for speed)."""

    def __init__(self, script: list[Reading]) -> None:
        super().__init__("/nonexistent", use_nvml=False)
        self._script: Iterator[Reading] = iter(script)

    def read(self, device: InventoryDevice) -> Reading:
        return next(self._script)


def _states(script: list[Reading], threshold: int) -> list[HealthState]:
    monitor = HealthMonitor(
        INVENTORY, pool_name="n1", healthy_threshold=threshold, reader=ScriptedReader(script)
    )
    out = []
    for _ in script:
        monitor.poll_once()
        out.append(monitor.health_snapshot()[0].state)
    return out


H, U, X = HealthState.HEALTHY, HealthState.UNHEALTHY, HealthState.UNKNOWN


@pytest.mark.parametrize(
    ("script", "threshold", "expected"),
    [
        pytest.param([OK, BAD, OK, OK, OK], 3, [H, U, U, U, H], id="heals-after-3"),
        pytest.param([OK, BAD, OK, BAD, OK, OK], 3, [H, U, U, U, U, U], id="flap-resets-streak"),
        pytest.param([BAD, UNKNOWN, OK, OK], 2, [U, U, U, H], id="unknown-does-not-heal"),
        pytest.param([OK, UNKNOWN, OK], 3, [H, X, H], id="unknown-without-fault-is-immediate"),
        pytest.param([BAD, OK], 1, [U, H], id="threshold-1"),
    ],
)
def test_hysteresis(script: list[Reading], threshold: int, expected: list[HealthState]) -> None:
    """Unhealthy is immediate; Healthy again needs N consecutive healthy readings."""
    assert _states(script, threshold) == expected


def test_reason_and_pool_in_snapshot() -> None:
    """The snapshot names pool, device and the reason of the current state."""
    monitor = HealthMonitor(INVENTORY, pool_name="n1", reader=ScriptedReader([BAD]))
    assert isinstance(monitor, HealthSource)
    monitor.poll_once()
    assert monitor.health_snapshot() == (DeviceHealth("n1", "cpu-numa0", HealthState.UNHEALTHY, "NoCarrier"),)


def test_wait_for_change_sees_a_change_made_before_the_wait() -> None:
    """A change between a consumer's snapshot and its wait is not lost."""
    monitor = HealthMonitor(INVENTORY, pool_name="n1", reader=ScriptedReader([OK, BAD, BAD]))
    monitor.poll_once()
    monitor.health_snapshot()
    assert not monitor.wait_for_change(0.01)
    monitor.poll_once()  # -> Unhealthy
    assert monitor.wait_for_change(0.01)
    assert not monitor.wait_for_change(0.01)
    monitor.poll_once()  # unchanged
    assert not monitor.wait_for_change(0.01)


def test_listeners_and_counters() -> None:
    """Listeners get the snapshot on each change only; counters track states and transitions."""
    calls: list[tuple[DeviceHealth, ...]] = []
    monitor = HealthMonitor(
        INVENTORY, pool_name="n1", healthy_threshold=1, reader=ScriptedReader([OK, OK, BAD, OK])
    )
    monitor.add_listener(lambda snap: calls.append(tuple(snap)))
    for _ in range(4):
        monitor.poll_once()
    assert [c[0].state for c in calls] == [H, U, H]
    assert monitor.transitions == {"Healthy": 2, "Unhealthy": 1}
    assert monitor.devices_by_state == {"Healthy": 1}


def test_wait_for_change_wakes_a_blocked_consumer() -> None:
    """A consumer blocked in wait_for_change returns True when the poll thread changes the model."""
    monitor = HealthMonitor(INVENTORY, pool_name="n1", reader=ScriptedReader([OK, BAD]))
    monitor.poll_once()
    result: list[bool] = []
    ready = threading.Event()

    def consumer() -> None:
        monitor.health_snapshot()
        ready.set()
        result.append(monitor.wait_for_change(5.0))

    thread = threading.Thread(target=consumer)
    thread.start()
    ready.wait(2)
    monitor.poll_once()
    thread.join(5)
    assert result == [True]


def test_bad_settings_are_rejected() -> None:
    """A zero interval or threshold is a configuration error."""
    with pytest.raises(ValueError, match="interval"):
        HealthMonitor(INVENTORY, pool_name="n1", interval=0)
