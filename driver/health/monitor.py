"""The one health model of the node: per device a state and a reason, smoothed by hysteresis.

Both outputs read it: the kubelet's health stream (through :class:`driver.plugin.HealthSource`)
and the slice taints (through listeners, see :mod:`driver.health.taints`), so they always agree.

Hysteresis: one Unhealthy reading makes a device Unhealthy at once (taint fast, within one poll);
it turns Healthy again only after ``healthy_threshold`` consecutive healthy readings, so a flapping
link does not make taints come and go every poll. An Unknown reading never heals an Unhealthy
device. Fatal faults are sticky in the reader (:mod:`driver.health.signals`): their readings stay
Unhealthy until a reset, so no number of polls heals them.

Operator clears (:mod:`driver.health.clear`) are taken from ``clear_dir`` at the start of every
poll; a valid one makes the device Healthy at its next healthy reading, without hysteresis.

The first snapshot is never empty: :meth:`health_snapshot` before any poll runs the first poll
itself, so a kubelet that opens its health stream right after registration gets every device.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from driver.health.clear import FUTURE_SKEW_S, ClearRequest, take_requests
from driver.health.signals import Reading, SignalReader
from driver.inventory.model import Inventory, InventoryDevice, NumaNode
from driver.log import get_logger
from driver.plugin import DeviceHealth, HealthState
from driver.supervise import supervised, survived

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
        clear_dir: str | None = None,
        faults_path: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0 or healthy_threshold < 1:
            raise ValueError("interval must be > 0 and healthy_threshold >= 1")
        self.pool_name = pool_name
        self.interval = interval
        self.healthy_threshold = healthy_threshold
        self._reader = reader or SignalReader(host_root, faults_path=faults_path)
        self._cdi_ids = prepared_cdi_ids
        self._clear_dir = clear_dir
        self._clock = clock
        self._cleared: set[str] = set()  # devices an operator cleared, waiting for a healthy reading
        self._polled = False
        self._poll_lock = threading.Lock()  # one poll at a time (thread, pokes, first snapshot)
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
        """Follow a changed inventory (devices gone from it drop out of the model) and poll now.

        A PCI function that left the inventory (hot-unplug seen by a rescan) counts as gone for its
        sticky fault: if it comes back, it is a new instance.
        """
        with self._cond:
            before = {d.pci.bus_id for _, d in self._inventory.devices() if not isinstance(d, NumaNode)}
            after = {d.pci.bus_id for _, d in inventory.devices() if not isinstance(d, NumaNode)}
            self._inventory = inventory
        for bus_id in before - after:
            self._reader.note_gone(bus_id)
        self.poke()

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(snapshot)`` after every change (from the polling thread).

        Added after the first poll, it gets the current snapshot at once: a device found
        Unhealthy by that poll must still reach the taints.
        """
        with self._poll_lock:
            self._listeners.append(listener)
            if self._polled:
                with self._cond:
                    snapshot = self._snapshot_locked()
                listener(snapshot)

    # -- HealthSource ----------------------------------------------------------------------------
    def health_snapshot(self) -> Sequence[DeviceHealth]:
        """Current health of every device of the inventory, in inventory order.

        Before the first poll this runs it, so the first answer lists every device.
        """
        if not self._polled:
            self._first_poll()
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
        """Poll once now unless done already (the first snapshot is real), then every ``interval``."""
        self._first_poll()
        self._thread = supervised("health-monitor", self._run)
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
                survived("health-monitor", exc, event="health poll failed")

    def _first_poll(self) -> None:
        """Poll unless a poll already finished; a caller racing with one waits for it instead."""
        with self._poll_lock:
            if not self._polled:
                self._poll_locked()

    def poll_once(self) -> bool:
        """Read every device once and apply hysteresis; True (and listeners called) on a change."""
        with self._poll_lock:
            return self._poll_locked()

    def _poll_locked(self) -> bool:
        """The body of :meth:`poll_once`; the caller holds the poll lock."""
        with self._cond:
            inventory = self._inventory
        if self._clear_dir is not None:
            self._take_clears(inventory)
        readings = [(dev, self._reader.read(dev)) for _, dev in inventory.devices()]
        with self._cond:
            changed = self._apply(readings)
            self._polled = True
            if changed:
                self._version += 1
                self._cond.notify_all()
            snapshot = self._snapshot_locked()
        if changed:  # under the poll lock: listeners see snapshots in order
            for listener in self._listeners:
                listener(snapshot)
        return changed

    def _take_clears(self, inventory: Inventory) -> None:
        assert self._clear_dir is not None
        requests, refused = take_requests(self._clear_dir)
        for name, why in refused:
            _log.warning("health clear request refused", file=name, why=why)
        for request in requests:
            why = self._clear(inventory, request)
            if why:
                _log.warning(
                    "health clear request refused",
                    device=request.device,
                    why=why,
                    note=request.note,
                    requested_at=request.requested_at,
                )

    def _clear(self, inventory: Inventory, request: ClearRequest) -> str:
        """Clear one device's sticky fault; "" when done, else why not."""
        device = inventory.find(request.device)
        if device is None or isinstance(device, NumaNode):
            return "no such PCI device is published on this node"
        fault = self._reader.fatal_fault(device.pci.bus_id)
        if fault is None:
            return "the device has no sticky fault to clear"
        if request.requested_at < fault.since:
            return f"requested at {request.requested_at:.0f}, before the fault at {fault.since:.0f}"
        if request.requested_at > self._clock() + FUTURE_SKEW_S:
            return f"requested at {request.requested_at:.0f}, in the future"
        self._reader.clear_fatal(device.pci.bus_id)
        with self._cond:
            self._cleared.add(device.name)
        _log.warning(
            "sticky fault cleared by an operator",
            device=device.name,
            fault=fault.reason,
            note=request.note,
            requested_at=request.requested_at,
        )
        return ""

    def _apply(self, readings: list[tuple[InventoryDevice, Reading]]) -> bool:
        now = time.monotonic()
        changed = set(self._tracks) != {dev.name for dev, _ in readings}
        tracks: dict[str, _Track] = {}
        for dev, reading in readings:
            track = self._tracks.get(dev.name) or _Track(HealthState.UNKNOWN, "NotYetRead", since=now)
            before = (track.state, track.reason)
            if dev.name in self._cleared and reading.state == HealthState.HEALTHY:
                self._cleared.discard(dev.name)
                track.state, track.reason, track.healthy_streak = HealthState.HEALTHY, "", 0
            else:
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
