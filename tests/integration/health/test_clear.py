"""Operator clears of sticky faults: ``numadra health clear`` -> request file -> the monitor.

Real files in a real plugin dir; the attacker cases plant files the way someone with write access
to a wrong place (or an old leftover) would, and the fault must stay.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from driver.cli import main
from driver.health.clear import CLEAR_DIR_NAME, clear_dir, take_requests, write_clear_request
from driver.health.monitor import HealthMonitor
from driver.health.signals import SignalReader
from driver.inventory.discovery import discover
from driver.inventory.model import DeviceKind, pci_device_name
from driver.plugin import HealthState
from harness.hosttree import write_host_tree

from .hosts import GPU_BDF, NIC_BDF, bump_aer, health_topology

GPU = pci_device_name(DeviceKind.GPU, GPU_BDF)
NIC = pci_device_name(DeviceKind.NIC, NIC_BDF)
T0 = 1_700_000_000.0  # the fault trips at this wall-clock time (injected clocks; in the past)


@dataclass
class Node:
    root: Path
    plugin_dir: Path
    monitor: HealthMonitor
    now: list[float]

    def state(self, device: str = GPU) -> tuple[HealthState, str]:
        h = {h.device_name: h for h in self.monitor.health_snapshot()}[device]
        return h.state, h.reason

    def request(self, device: str = GPU, at: float | None = None) -> Path:
        return write_clear_request(self.plugin_dir, device, "reset by hand", T0 + 5 if at is None else at)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    root = write_host_tree(tmp_path / "host", health_topology(1))
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir(mode=0o750)
    now = [T0]
    reader = SignalReader(str(root), use_nvml=False, clock=lambda: now[0])
    monitor = HealthMonitor(
        discover(root, use_nvml=False),
        pool_name="n",
        healthy_threshold=3,
        reader=reader,
        clear_dir=clear_dir(plugin_dir),
        clock=lambda: now[0],
    )
    monitor.poll_once()
    bump_aer(root, GPU_BDF, 1)
    monitor.poll_once()
    assert monitor.health_snapshot()[0].reason == "PciAerFatal"
    now[0] = T0 + 10
    yield Node(root, plugin_dir, monitor, now)


def _events(logs: list[MutableMapping[str, Any]], event: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == event]


def test_cli_clear_heals_at_the_next_poll_and_is_logged(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """``numadra health clear`` writes the request; the next poll clears the fault (no hysteresis)."""
    node.now[0] = time.time()  # the CLI stamps the request with the real clock
    assert (
        main(["health", "clear", GPU, "--plugin-dir", str(node.plugin_dir), "--note", "nvidia-smi -r"]) == 0
    )
    assert f"requested a clear of {GPU}" in capsys.readouterr().out
    written = node.plugin_dir / CLEAR_DIR_NAME / f"{GPU}.json"
    assert oct(written.stat().st_mode & 0o777) == "0o600"
    with capture_logs() as logs:
        node.monitor.poll_once()
    assert node.state() == (HealthState.HEALTHY, "")
    (cleared,) = _events(logs, "sticky fault cleared by an operator")
    assert (cleared["device"], cleared["fault"], cleared["note"]) == (GPU, "PciAerFatal", "nvidia-smi -r")
    assert not written.exists()  # consumed
    node.monitor.poll_once()
    assert node.state() == (HealthState.HEALTHY, "")  # the old count is no new fault
    bump_aer(node.root, GPU_BDF, 2)
    node.monitor.poll_once()
    assert node.state() == (HealthState.UNHEALTHY, "PciAerFatal")  # a new error trips again


def test_request_older_than_the_fault_is_refused(node: Node) -> None:
    """A leftover (or planted-ahead) file cannot clear a fault that happened after it was written."""
    node.request(at=T0 - 1)
    with capture_logs() as logs:
        node.monitor.poll_once()
    assert node.state() == (HealthState.UNHEALTHY, "PciAerFatal")
    (refused,) = _events(logs, "health clear request refused")
    assert "before the fault" in str(refused["why"])


def test_request_from_the_future_is_refused(node: Node) -> None:
    """requestedAt beyond the allowed clock skew is not believed."""
    node.request(at=T0 + 10 + 3600)
    node.monitor.poll_once()
    assert node.state() == (HealthState.UNHEALTHY, "PciAerFatal")


def test_request_for_a_healthy_or_unknown_device_is_refused(node: Node) -> None:
    """Nothing to clear on a healthy NIC; an unpublished name is refused; the GPU stays faulty."""
    node.request(NIC)
    node.request("gpu-0000-99-00-0")
    with capture_logs() as logs:
        node.monitor.poll_once()
    whys = sorted(str(e["why"]) for e in _events(logs, "health clear request refused"))
    assert whys == ["no such PCI device is published on this node", "the device has no sticky fault to clear"]
    assert node.state() == (HealthState.UNHEALTHY, "PciAerFatal")


@pytest.mark.parametrize(
    ("plant", "why"),
    [
        pytest.param("symlink", "symbolic link, which numadra does not follow", id="symlink"),
        pytest.param("world-writable", "mode 666", id="world-writable"),
        pytest.param("other-device", "not the one in its file name", id="name-mismatch"),
        pytest.param("extra-field", "exactly", id="extra-field"),
        pytest.param("not-json", "not JSON", id="not-json"),
        pytest.param("huge", "more than the 4096 allowed", id="too-big"),
        pytest.param("huge-time", "requestedAt: must be between 0 and 1e+11", id="400-digit-time"),
        pytest.param("fifo", "is a FIFO, not a regular file", id="fifo"),
    ],
)
def test_planted_or_malformed_files_are_refused_and_removed(node: Node, plant: str, why: str) -> None:
    """Every odd request file is refused with its reason, deleted, and the fault stays."""
    directory = node.plugin_dir / CLEAR_DIR_NAME
    directory.mkdir(mode=0o700)
    target = directory / f"{GPU}.json"
    good = json.dumps({"device": GPU, "requestedAt": T0 + 5, "note": ""})
    if plant == "symlink":
        real = node.plugin_dir / "elsewhere.json"
        real.write_text(good)
        target.symlink_to(real)
    elif plant == "world-writable":
        target.write_text(good)
        target.chmod(0o666)
    elif plant == "other-device":
        target.write_text(json.dumps({"device": NIC, "requestedAt": T0 + 5, "note": ""}))
    elif plant == "extra-field":
        target.write_text(json.dumps({"device": GPU, "requestedAt": T0 + 5, "note": "", "force": True}))
    elif plant == "huge-time":  # math.isfinite(10**400) raised OverflowError: every poll failed
        target.write_text(json.dumps({"device": GPU, "requestedAt": 10**400, "note": ""}))
    elif plant == "fifo":
        os.mkfifo(target, 0o600)
    elif plant == "not-json":
        target.write_bytes(b"\xff\xfe{")
    else:
        target.write_text(good[:-1] + ', "pad": "' + "x" * 5000 + '"}')
    with capture_logs() as logs:
        node.monitor.poll_once()
    (refused,) = _events(logs, "health clear request refused")
    assert why in str(refused["why"]), refused
    assert not os.path.lexists(target)
    assert node.state() == (HealthState.UNHEALTHY, "PciAerFatal")


def test_untrusted_directory_is_refused_as_a_whole(tmp_path: Path) -> None:
    """A group-writable (or symlinked) clear directory is not read at all."""
    directory = tmp_path / "plugin" / CLEAR_DIR_NAME
    directory.mkdir(parents=True)
    directory.chmod(0o777)
    (directory / f"{GPU}.json").write_text(json.dumps({"device": GPU, "requestedAt": T0, "note": ""}))
    valid, refused = take_requests(str(directory))
    assert valid == [] and "world-writable" in refused[0][1]
    assert (directory / f"{GPU}.json").exists()  # left for the operator to look at


def test_cli_rejects_a_bad_device_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path-like device name never becomes a file name outside the clear directory."""
    assert main(["health", "clear", "../../etc/x", "--plugin-dir", str(tmp_path)]) == 2
    assert "is not a device name" in capsys.readouterr().err
    assert not (tmp_path / CLEAR_DIR_NAME).exists() or not any((tmp_path / CLEAR_DIR_NAME).iterdir())
