"""The hot-plug debouncer (real threads, short windows) and the no-op fallback without udev."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from driver.inventory.watch import Debouncer, NoopWatcher, start_watcher

WINDOW = 0.05


class _Counter:
    """Counts callback calls and lets a test wait for the n-th one."""

    def __init__(self) -> None:
        self.calls = 0
        self.times: list[float] = []
        self._cond = threading.Condition()

    def __call__(self) -> None:
        with self._cond:
            self.calls += 1
            self.times.append(time.monotonic())
            self._cond.notify_all()

    def wait_for(self, n: int, timeout: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.calls >= n, timeout=timeout)


def test_burst_fires_once() -> None:
    """Many triggers within the window produce exactly one callback."""
    counter = _Counter()
    debouncer = Debouncer(counter, window_s=WINDOW)
    try:
        for _ in range(50):
            debouncer.trigger()
        assert counter.wait_for(1)
        time.sleep(WINDOW * 4)
        assert counter.calls == 1
        assert debouncer.fired == 1
    finally:
        debouncer.close()


def test_fires_only_after_quiet_window() -> None:
    """The callback comes no earlier than one window after the last trigger."""
    counter = _Counter()
    debouncer = Debouncer(counter, window_s=0.2)
    try:
        first = time.monotonic()
        debouncer.trigger()
        time.sleep(0.1)
        last = time.monotonic()
        debouncer.trigger()
        assert counter.wait_for(1)
        # on a loaded machine the sleep can outlast the window, and the first trigger fire alone:
        # the rule holds for whichever trigger came last before the callback
        fired = counter.times[0]
        assert fired - (last if fired >= last else first) >= 0.2 - 0.01
    finally:
        debouncer.close()


def test_separate_bursts_fire_separately() -> None:
    """Two bursts separated by more than the window give two callbacks."""
    counter = _Counter()
    debouncer = Debouncer(counter, window_s=WINDOW)
    try:
        debouncer.trigger()
        assert counter.wait_for(1)
        debouncer.trigger()
        assert counter.wait_for(2)
    finally:
        debouncer.close()


def test_endless_storm_still_fires_after_max_delay() -> None:
    """Events that never stop cannot starve the callback beyond max_delay_s.

    The quiet window is 30 s and the storm lasts until the callback comes (20 s at most, the hang
    guard): only max_delay_s (0.3 s) can fire it while the storm goes on."""
    counter = _Counter()
    debouncer = Debouncer(counter, window_s=30.0, max_delay_s=0.3)
    try:
        deadline = time.monotonic() + 20
        while counter.calls == 0 and time.monotonic() < deadline:
            debouncer.trigger()
            time.sleep(0.02)
        assert counter.calls >= 1, "the storm starved the callback"
    finally:
        debouncer.close()


def test_failing_callback_keeps_debouncer_alive() -> None:
    """An exception in the callback is logged and the next burst is still delivered."""
    calls: list[int] = []
    done = threading.Event()

    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("rediscovery failed")
        done.set()

    debouncer = Debouncer(flaky, window_s=WINDOW)
    try:
        debouncer.trigger()
        time.sleep(WINDOW * 4)
        debouncer.trigger()
        assert done.wait(5)
        assert len(calls) == 2
    finally:
        debouncer.close()


def test_close_drops_pending_and_stops_thread() -> None:
    """close() returns promptly, and a burst pending at close never fires."""
    counter = _Counter()
    debouncer = Debouncer(counter, window_s=0.5)
    debouncer.trigger()
    debouncer.close()
    time.sleep(0.6)
    assert counter.calls == 0


def test_window_must_be_positive() -> None:
    """A zero window is a programming error."""
    with pytest.raises(ValueError, match="window"):
        Debouncer(lambda: None, window_s=0)


def test_no_udev_gives_noop_watcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """When pyudev/libudev cannot be imported, start_watcher degrades to a no-op watcher."""
    monkeypatch.setitem(sys.modules, "pyudev", None)  # makes "import pyudev" raise ImportError
    watcher = start_watcher(lambda: None)
    assert isinstance(watcher, NoopWatcher)
    watcher.stop()
