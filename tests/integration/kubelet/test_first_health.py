"""The first health message over a real unix socket lists every published device.

A kubelet opens ``NodeWatchResources`` as soon as the plugin registers. When the stream answered
before the monitor's first reading, that first message listed no devices; the kubelet then knew
nothing about them until the next change or resend (up to 10 s). The monitor here is never
started: the stream itself must get a complete first message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from driver.health.monitor import HealthMonitor
from driver.health.signals import Reading, SignalReader
from driver.inventory.discovery import discover
from driver.inventory.model import InventoryDevice
from driver.kubelet.server import KubeletPluginServer
from harness.hosttree import TOPOLOGIES, write_host_tree
from harness.kubeletclient import KubeletClient
from tests.support.fakeplugin import FakePlugin


class SlowReader(SignalReader):
    """The real sysfs reader, 20 ms per device: a first poll that takes a while (a big node)."""

    reads = 0

    def read(self, device: InventoryDevice) -> Reading:
        time.sleep(0.02)
        self.reads += 1
        return super().read(device)


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
def test_first_message_lists_every_device_before_any_poll(
    tmp_path: Path,
    make_server: Callable[..., KubeletPluginServer],
    client: KubeletClient,
    version: str,
) -> None:
    """A stream opened right after registration, monitor never polled: all devices, each Healthy."""
    root = write_host_tree(tmp_path / "host", TOPOLOGIES["mixed"])
    inventory = discover(root, use_nvml=False)
    monitor = HealthMonitor(inventory, pool_name="node-a", reader=SignalReader(str(root), use_nvml=False))
    server = make_server(FakePlugin(), health=monitor)
    server.start()
    stream = client.watch_health(server.dra_socket, version)  # type: ignore[arg-type]
    try:
        first = next(stream)
    finally:
        stream.cancel()
    published = {dev.name for _, dev in inventory.devices()}
    assert {d.device.device_name for d in first.devices} == published
    assert len(published) == 11
    assert {d.health for d in first.devices} == {1}  # Healthy


def test_stream_racing_the_first_poll_waits_for_it(
    tmp_path: Path, make_server: Callable[..., KubeletPluginServer], client: KubeletClient
) -> None:
    """The monitor's own first poll is under way (slow) when the kubelet asks: the answer waits for
    that poll instead of sending what is known so far, and the devices are read once, not twice."""
    root = write_host_tree(tmp_path / "host", TOPOLOGIES["mixed"])
    inventory = discover(root, use_nvml=False)
    reader = SlowReader(str(root), use_nvml=False)
    monitor = HealthMonitor(inventory, pool_name="node-a", reader=reader)
    starter = threading.Thread(target=monitor.start)
    starter.start()
    server = make_server(FakePlugin(), health=monitor)
    server.start()
    stream = client.watch_health(server.dra_socket)
    try:
        first = next(stream)
    finally:
        stream.cancel()
        starter.join(10)
        monitor.stop()
    assert len(first.devices) == 11
    assert reader.reads == 11
    assert monitor.transitions == {"Healthy": 11}
