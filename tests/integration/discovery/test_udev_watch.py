"""The real udev watcher: a kernel uevent on the net subsystem reaches the debounced callback."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from driver.inventory.watch import NoopWatcher, UdevWatcher, start_watcher

UEVENT = Path("/sys/class/net/lo/uevent")


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(UEVENT, os.W_OK), reason="needs root to emit a uevent")
def test_kernel_uevent_triggers_callback_once() -> None:
    """Writing "change" to lo's uevent twice in a burst gives one debounced callback."""
    calls: list[float] = []
    fired = threading.Event()

    def on_change() -> None:
        calls.append(time.monotonic())
        fired.set()

    watcher = start_watcher(on_change, window_s=0.3, source="kernel")
    if isinstance(watcher, NoopWatcher):
        pytest.skip("no netlink uevent socket on this machine")
    assert isinstance(watcher, UdevWatcher)
    try:
        time.sleep(0.2)  # the monitor thread is polling
        UEVENT.write_text("change")
        UEVENT.write_text("change")
        assert fired.wait(10), "no uevent arrived"
        time.sleep(0.6)
        assert len(calls) == 1
    finally:
        watcher.stop()
