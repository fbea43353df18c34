"""Hot-plug: udev events on the pci, net and infiniband subsystems -> one debounced "inventory changed".

A hot-plug or a driver (re)bind produces bursts of dozens of uevents (a PF with 64 VFs, a GPU with
its DRM nodes). Rediscovering and republishing on each would churn the apiserver, so events only
(re)arm a :class:`Debouncer`, which calls back once the burst has been quiet for ``window_s`` (and at
the latest after ``max_delay_s``, so a never-ending storm cannot starve publishing).

The debouncer is plain threading and tested on its own; the pyudev part starts only when a netlink
monitor can be opened. Where libudev or netlink is unavailable, :func:`start_watcher` logs once and
returns a no-op watcher: hot-plug then waits for the next periodic resync. Wiring the callback to
publishing is the caller's job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from driver.log import get_logger
from driver.supervise import supervised, survived

__all__ = [
    "DEFAULT_DEBOUNCE_S",
    "WATCHED_SUBSYSTEMS",
    "Debouncer",
    "HotplugWatcher",
    "NoopWatcher",
    "UdevWatcher",
    "Watcher",
    "start_watcher",
]

_log = get_logger("inventory.watch")

DEFAULT_DEBOUNCE_S = 1.0
WATCHED_SUBSYSTEMS = ("pci", "net", "infiniband")


class Watcher(Protocol):
    """A running inventory watcher."""

    def stop(self) -> None:
        """Stop watching; no callback runs after this returns."""


class Debouncer:
    """Collapse bursts of :meth:`trigger` calls into one ``callback`` call per quiet period.

    The callback runs on the debouncer's own daemon thread; an exception in it is logged and the
    debouncer keeps going (the next event retries).
    """

    def __init__(
        self,
        callback: Callable[[], None],
        *,
        window_s: float = DEFAULT_DEBOUNCE_S,
        max_delay_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"debounce window must be > 0, got {window_s}")
        self._callback = callback
        self._window = window_s
        self._max_delay = max_delay_s if max_delay_s is not None else 10 * window_s
        self._clock = clock
        self._cond = threading.Condition()
        self._first: float | None = None  # time of the first trigger of the pending burst
        self._last: float = 0.0
        self._closed = False
        self._fired = 0
        self._thread = supervised("numadra-debounce", self._run)
        self._thread.start()

    @property
    def fired(self) -> int:
        """How many times the callback has been called."""
        return self._fired

    def trigger(self) -> None:
        """Note one event; the callback follows once events stop for the window."""
        with self._cond:
            now = self._clock()
            if self._first is None:
                self._first = now
            self._last = now
            self._cond.notify()

    def close(self) -> None:
        """Stop the thread; a pending burst is dropped (the caller is shutting down)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _due(self) -> float | None:
        """Seconds until the pending burst fires (<= 0: now), or None when nothing is pending."""
        if self._first is None:
            return None
        deadline = min(self._last + self._window, self._first + self._max_delay)
        return deadline - self._clock()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    due = self._due()
                    if due is not None and due <= 0:
                        break
                    self._cond.wait(timeout=due)
                if self._closed:
                    return
                self._first = None
            try:
                self._callback()
            except Exception as exc:  # a failed rediscovery must not kill hot-plug handling
                survived("numadra-debounce", exc, event="inventory change callback failed")
            self._fired += 1


class NoopWatcher:
    """Stand-in when udev cannot be watched (no libudev, no netlink): never calls back."""

    def stop(self) -> None:
        """Nothing to stop."""


class UdevWatcher:
    """A pyudev netlink monitor on :data:`WATCHED_SUBSYSTEMS` feeding a :class:`Debouncer`."""

    def __init__(self, observer: Any, debouncer: Debouncer) -> None:
        self._observer = observer
        self._debouncer = debouncer

    def stop(self) -> None:
        """Stop the monitor thread, then the debouncer."""
        self._observer.stop()
        self._debouncer.close()


def start_watcher(
    on_change: Callable[[], None],
    *,
    window_s: float = DEFAULT_DEBOUNCE_S,
    subsystems: Iterable[str] = WATCHED_SUBSYSTEMS,
    source: str = "udev",
) -> Watcher:
    """Watch udev and call ``on_change`` (debounced) after hot-plug events; no-op without udev.

    ``source`` is pyudev's netlink source: ``"udev"`` (events after udevd processed them, the normal
    case on a host) or ``"kernel"`` (raw kernel uevents, for hosts or containers without udevd).
    """
    try:
        import pyudev

        context = pyudev.Context()
        monitor = pyudev.Monitor.from_netlink(context, source=source)
        for subsystem in subsystems:
            monitor.filter_by(subsystem=subsystem)
        monitor.start()
    except Exception as exc:  # ImportError (no libudev), OSError (no netlink): degrade, never fail
        _log.warning("udev unavailable, hot-plug detection disabled", error=str(exc))
        return NoopWatcher()
    debouncer = Debouncer(on_change, window_s=window_s)

    def _on_event(device: Any) -> None:
        _log.debug("udev event", device=str(getattr(device, "sys_name", device)), action=device.action)
        debouncer.trigger()

    observer = pyudev.MonitorObserver(monitor, callback=_on_event, name="numadra-udev")
    observer.daemon = True
    observer.start()
    return UdevWatcher(observer, debouncer)


class HotplugWatcher:
    """:func:`start_watcher` as a part with ``start()`` and ``stop()`` (``numadra run``'s udev watcher)."""

    def __init__(self, on_change: Callable[[], None], *, source: str = "udev") -> None:
        self._on_change = on_change
        self._source = source
        self._watcher: Watcher = NoopWatcher()

    def start(self) -> None:
        """Start watching (a no-op watcher where udev cannot be watched)."""
        self._watcher = start_watcher(self._on_change, source=self._source)

    def stop(self) -> None:
        """Stop watching; no callback runs after this returns."""
        self._watcher.stop()
