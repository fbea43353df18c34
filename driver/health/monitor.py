"""The one health model of the node: per device a state and a reason, smoothed by hysteresis.

Both outputs read it: the kubelet's health stream (through :class:`driver.plugin.HealthSource`)
and the slice taints (through listeners, see :mod:`driver.health.taints`), so they always agree.

Hysteresis: one Unhealthy reading makes a device Unhealthy at once (taint fast, within one poll);
it turns Healthy again only after ``healthy_threshold`` consecutive healthy readings, so a flapping
link does not make taints come and go every poll. An Unknown reading never heals an Unhealthy
device.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from driver.health.signals import Reading, SignalReader
from driver.inventory.model import Inventory, InventoryDevice
from driver.log import get_logger
from driver.plugin import DeviceHealth, HealthState

__all__ = ["HealthMonitor", "Listener"]

Listener = Callable[[Sequence[DeviceHealth]], None]
_log = get_logger("health.monitor")


@dataclass(slots=True)
class _Track:
    state: HealthState
    reason: str
    healthy_streak: int = 0
    since: float = 0.0


class HealthMonitor:
    """Polls every device of the inventory; implements :class:`driver.plugin.HealthSource`."""

    def __init__(
        self,
        inventory: Inventory,
        *,
        pool_name: str,
        host_root: str = "/",
        interval: float = 2.0,
        healthy_threshold: int = 3,
        reader: SignalReader | None = None,
        prepared_cdi_ids: Callable[[str], tuple[str, ...]] | None = None,
    ) -> None:
        if interval <= 0 or healthy_threshold < 1:
            raise ValueError("interval must be > 0 and healthy_threshold >= 1")
        self.pool_name = pool_name
        self.interval = interval
        self.healthy_threshold = healthy_threshold
        self._reader = reader or SignalReader(host_root)
        self._cdi_ids = prepared_cdi_ids
        self._inventory = inventory
        self._tracks: dict[str, _Track] = {}
        self._listeners: list[Listener] = []
        self._cond = threading.Condition()
        self._version = 0
        self._seen = threading.local()  # per consumer thread: the version it last saw
        self._stopping = False
        self._poke = False
        self._thread: threading.Thread | None = None
        #: metrics hooks: devices per state after the last poll, and state transitions by new state
        self.devices_by_state: Counter[str] = Counter()
        self.transitions: Counter[str] = Counter()

    # -- configuration ---------------------------------------------------------------------------
    def set_inventory(self, inventory: Inventory) -> None:
        """Follow a changed inventory (devices gone from it drop out of the model) and poll now."""
        with self._cond:
            self._inventory = inventory
        self.poke()

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(snapshot)`` after every change (from the polling thread)."""
        self._listeners.append(listener)

    # -- HealthSource ----------------------------------------------------------------------------
    def health_snapshot(self) -> Sequence[DeviceHealth]:
        """Current health of every device of the inventory, in inventory order."""
        with self._cond:
            self._seen.version = self._version
            return self._snapshot_locked()

    def wait_for_change(self, timeout: float) -> bool:
        """True as soon as the model changed since this thread last looked, else False at timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = getattr(self._seen, "version", None)
            if seen is None:
                seen = self._seen.version = self._version
            while self._version == seen:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping:
                    return False
                self._cond.wait(left)
            self._seen.version = self._version
            return True

    # -- polling ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Poll once now (so the first snapshot is real), then every ``interval`` in a thread."""
        self.poll_once()
        self._thread = threading.Thread(target=self._run, name="health-monitor", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling; waiting consumers return False."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def poke(self) -> None:
        """Poll now instead of at the next interval (a udev event about a device)."""
        with self._cond:
            self._poke = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                deadline = time.monotonic() + self.interval
                while not (self._stopping or self._poke) and time.monotonic() < deadline:
                    self._cond.wait(max(0.0, deadline - time.monotonic()))
                if self._stopping:
                    return
                self._poke = False
            try:
                self.poll_once()
            except Exception as exc:  # a reader bug must not end health reporting for good
                _log.error("health poll failed", error=str(exc))

    def poll_once(self) -> bool:
        """Read every device once and apply hysteresis; True (and listeners called) on a change."""
        with self._cond:
            inventory = self._inventory
        readings = [(dev, self._reader.read(dev)) for _, dev in inventory.devices()]
        with self._cond:
            changed = self._apply(readings)
            if changed:
                self._version += 1
                self._cond.notify_all()
            snapshot = self._snapshot_locked()
        if changed:
            for listener in self._listeners:
                listener(snapshot)
        return changed

    def _apply(self, readings: list[tuple[InventoryDevice, Reading]]) -> bool:
        now = time.monotonic()
        changed = set(self._tracks) != {dev.name for dev, _ in readings}
        tracks: dict[str, _Track] = {}
        for dev, reading in readings:
            track = self._tracks.get(dev.name) or _Track(HealthState.UNKNOWN, "NotYetRead", since=now)
            before = (track.state, track.reason)
            self._step(track, reading)
            if (track.state, track.reason) != before:
                changed = True
                track.since = now
                if track.state != before[0]:
                    self.transitions[track.state.value] += 1
                    # the first reading of a healthy device is no news: debug, not one line per device
                    first_ok = before[1] == "NotYetRead" and track.state == HealthState.HEALTHY
                    log = _log.debug if first_ok else _log.info
                    log(
                        "device health changed",
                        device=dev.name,
                        state=track.state.value,
                        reason=track.reason,
                        previous=before[0].value,
                    )
            tracks[dev.name] = track
        self._tracks = tracks
        self.devices_by_state = Counter(t.state.value for t in tracks.values())
        return changed

    def _step(self, track: _Track, reading: Reading) -> None:
        if reading.state == HealthState.UNHEALTHY or track.state != HealthState.UNHEALTHY:
            track.state, track.reason, track.healthy_streak = reading.state, reading.reason, 0
        elif reading.state == HealthState.HEALTHY:
            track.healthy_streak += 1
            if track.healthy_streak >= self.healthy_threshold:
                track.state, track.reason, track.healthy_streak = reading.state, "", 0
        else:  # Unknown while Unhealthy: no evidence of recovery
            track.healthy_streak = 0

    def _snapshot_locked(self) -> tuple[DeviceHealth, ...]:
        out = []
        for name, track in self._tracks.items():
            ids = self._cdi_ids(name) if self._cdi_ids is not None else ()
            out.append(DeviceHealth(self.pool_name, name, track.state, track.reason, ids))
        return tuple(out)
