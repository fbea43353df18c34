"""HotplugWatcher: the udev watcher as a part of ``numadra run``, with start and stop."""

from __future__ import annotations

import threading

from driver.inventory.watch import HotplugWatcher


def _udev_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "numadra-udev"}


def test_stop_before_start_is_fine() -> None:
    """A start that failed before this part leaves it unstarted; stopping it then does nothing:
    it raises nothing, starts no thread and calls nothing back, also when stopped twice."""
    before = _udev_threads()
    changes: list[None] = []
    watcher = HotplugWatcher(lambda: changes.append(None))
    watcher.stop()
    watcher.stop()
    assert _udev_threads() == before
    assert changes == []


def test_start_then_stop_leaves_no_thread() -> None:
    """With udev (or without: the no-op watcher), stop ends whatever start began."""
    before = _udev_threads()
    watcher = HotplugWatcher(lambda: None, source="kernel")
    watcher.start()
    watcher.stop()
    assert _udev_threads() == before
