"""Fatal faults outlive the driver: a restart (rolling update, crash) must not untaint a broken GPU.

The accident: a GPU's AER fatal counter rose, the driver tainted it, then the driver restarted. The
new process's first reading has no earlier counter to compare with, so before the faults file it
found the GPU "healthy" and the scheduler could hand it to new pods. Each test plays two driver
processes as two readers (and monitors) over the same host tree and plugin dir.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from driver.health.monitor import HealthMonitor
from driver.health.signals import HEALTH_FAULTS_FILE, SignalReader
from driver.inventory.discovery import discover
from driver.inventory.model import DeviceKind, pci_device_name
from driver.plugin import HealthState
from harness.hosttree import write_host_tree

from .hosts import GPU_BDF, NIC_BDF, bump_aer, health_topology, replug, unplug, write

pytestmark = pytest.mark.fault

GPU = pci_device_name(DeviceKind.GPU, GPU_BDF)
NIC = pci_device_name(DeviceKind.NIC, NIC_BDF)
BOOT = "proc/sys/kernel/random/boot_id"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = write_host_tree(tmp_path / "host", health_topology(1))
    (root / BOOT).parent.mkdir(parents=True, exist_ok=True)
    (root / BOOT).write_text("6e1f4a8c-0000-4000-8000-000000000001\n")
    return root


@pytest.fixture
def faults(tmp_path: Path) -> Path:
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    return plugin_dir / HEALTH_FAULTS_FILE


def driver_process(root: Path, faults: Path) -> HealthMonitor:
    """One driver process's health model, polled once (as `numadra run` does before registering)."""
    reader = SignalReader(str(root), use_nvml=False, faults_path=str(faults))
    monitor = HealthMonitor(discover(root, use_nvml=False), pool_name="node1", reader=reader)
    monitor.poll_once()
    return monitor


def state(monitor: HealthMonitor) -> tuple[HealthState, str]:
    h = {h.device_name: h for h in monitor.health_snapshot()}[GPU]
    return h.state, h.reason


def trip(root: Path, faults: Path, total: int = 2) -> None:
    """The first process sees the counter rise and records the fault."""
    first = driver_process(root, faults)
    bump_aer(root, GPU_BDF, total)
    first.poll_once()
    assert state(first) == (HealthState.UNHEALTHY, "PciAerFatal")


def test_a_restarted_driver_keeps_the_fault(root: Path, faults: Path) -> None:
    trip(root, faults)
    second = driver_process(root, faults)  # the counter still says 2: nothing reset the GPU
    for _ in range(10):
        second.poll_once()
    assert state(second) == (HealthState.UNHEALTHY, "PciAerFatal")
    assert stat.S_IMODE(faults.stat().st_mode) == 0o600


def test_without_the_file_a_restart_forgot_the_fault(root: Path, faults: Path) -> None:
    """What went wrong before: a process with no record reads the same tree as healthy."""
    trip(root, faults)
    forgetful = SignalReader(str(root), use_nvml=False)
    monitor = HealthMonitor(discover(root, use_nvml=False), pool_name="node1", reader=forgetful)
    monitor.poll_once()
    assert state(monitor) == (HealthState.HEALTHY, "")


def test_a_counter_below_the_trip_value_after_a_restart_is_a_reset(root: Path, faults: Path) -> None:
    trip(root, faults, total=3)
    bump_aer(root, GPU_BDF, 0)  # reset while no driver ran: a new device instance
    second = driver_process(root, faults)
    for _ in range(3):
        second.poll_once()
    assert state(second) == (HealthState.HEALTHY, "")
    assert json.loads(faults.read_text())["faults"] == {}
    assert state(driver_process(root, faults)) == (HealthState.HEALTHY, "")


def test_a_reboot_resets_every_device(root: Path, faults: Path) -> None:
    trip(root, faults)
    write(root, BOOT, "6e1f4a8c-0000-4000-8000-000000000002\n")
    assert state(driver_process(root, faults)) == (HealthState.HEALTHY, "")


def test_gone_while_running_and_back_after_a_restart_is_a_reset(root: Path, faults: Path) -> None:
    first = driver_process(root, faults)
    bump_aer(root, GPU_BDF, 1)
    first.poll_once()
    target = unplug(root, GPU_BDF)
    first.poll_once()  # the first process saw it gone: recorded
    replug(root, GPU_BDF, target)
    second = driver_process(root, faults)
    for _ in range(3):
        second.poll_once()
    assert state(second) == (HealthState.HEALTHY, "")


def test_an_operator_clear_is_recorded_too(root: Path, faults: Path) -> None:
    trip(root, faults)
    reader = SignalReader(str(root), use_nvml=False, faults_path=str(faults))
    assert reader.clear_fatal(GPU_BDF) is not None
    assert state(driver_process(root, faults)) == (HealthState.HEALTHY, "")


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b'{"version": 7, "faults": {}}',
        b'{"version": 1, "faults": []}',
        b"\xff\xfe",
        b" " * (2 << 20),
    ],
)
def test_a_damaged_file_is_logged_not_a_crash(root: Path, faults: Path, damage: bytes) -> None:
    faults.write_bytes(damage)
    monitor = driver_process(root, faults)
    assert state(monitor) == (HealthState.HEALTHY, "")
    bump_aer(root, GPU_BDF, 1)
    monitor.poll_once()
    assert state(monitor) == (HealthState.UNHEALTHY, "PciAerFatal")  # and the file is whole again
    assert GPU_BDF in json.loads(faults.read_text())["faults"]


def test_bad_entries_are_skipped_and_good_ones_kept(root: Path, faults: Path) -> None:
    good = {"reason": "PciAerFatal", "tripTotal": 2, "since": 1.0, "gone": False}
    faults.write_text(
        json.dumps(
            {
                "version": 1,
                "bootID": "6e1f4a8c-0000-4000-8000-000000000001",
                "faults": {
                    "../../etc": good,
                    "0000:3c:00.0": {**good, "reason": "Evil\nText"},
                    "0000:3d:00.0": {**good, "tripTotal": -1},
                    "0000:3e:00.0": {**good, "since": "soon"},
                    "0000:3f:00.0": {**good, "gone": 1},
                    GPU_BDF: good,
                },
            }
        )
    )
    bump_aer(root, GPU_BDF, 2)
    monitor = driver_process(root, faults)
    assert state(monitor) == (HealthState.UNHEALTHY, "PciAerFatal")
    bump_aer(root, GPU_BDF, 0)  # the next change rewrites the file from what was kept
    monitor.poll_once()
    assert json.loads(faults.read_text())["faults"] == {}


def test_a_planted_link_is_neither_read_nor_written_through(root: Path, faults: Path, tmp_path: Path) -> None:
    """A link at the file's path: nothing is read from its target, and the next save replaces
    the link instead of writing through it."""
    victim = tmp_path / "victim.json"
    victim.write_text(
        json.dumps(
            {
                "version": 1,
                "faults": {GPU_BDF: {"reason": "Planted", "tripTotal": 0, "since": 1.0, "gone": False}},
            }
        )
    )
    faults.symlink_to(victim)
    monitor = driver_process(root, faults)
    assert state(monitor) == (HealthState.HEALTHY, "")
    bump_aer(root, GPU_BDF, 1)
    monitor.poll_once()
    assert not faults.is_symlink()
    assert "Planted" in victim.read_text()
    assert victim.stat().st_nlink == 1


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(b"[" * 100_000, id="nested-too-deep"),  # RecursionError, not a ValueError
        pytest.param(b'{"version": 1, "faults": {"x": ' + b"9" * 5000 + b"}}", id="5000-digits"),
    ],
)
def test_a_file_python_cannot_decode_is_logged_not_a_crash(root: Path, faults: Path, damage: bytes) -> None:
    faults.write_bytes(damage)
    with capture_logs() as logs:
        monitor = driver_process(root, faults)
    assert state(monitor) == (HealthState.HEALTHY, "")
    assert [e["event"] for e in logs if e["log_level"] == "error"] == [
        "recorded fatal device faults are damaged; none restored"
    ]


@pytest.mark.parametrize("field", ["since", "tripTotal"])
def test_a_400_digit_number_skips_that_fault_only(root: Path, faults: Path, field: str) -> None:
    """Case 3 of the issue: a recorded fault whose time was a 400-digit integer raised
    OverflowError (``math.isfinite``) at every start, a crash loop while the file stayed. Now
    that entry is skipped and named, and the other device's fault is kept."""
    good = {"reason": "PciAerFatal", "tripTotal": 0, "since": 1_700_000_000.0, "gone": False}
    doc = {
        "version": 1,
        "bootID": (root / BOOT).read_text().strip(),
        "faults": {GPU_BDF: {**good, field: 10**400}, NIC_BDF: good},
    }
    faults.write_text(json.dumps(doc))
    with capture_logs() as logs:
        monitor = driver_process(root, faults)
    nic = {h.device_name: h for h in monitor.health_snapshot()}[NIC]
    assert (nic.state, nic.reason) == (HealthState.UNHEALTHY, "PciAerFatal")  # the good entry kept
    assert state(monitor) == (HealthState.HEALTHY, "")  # the bad one skipped
    (skipped,) = [e for e in logs if e["event"] == "recorded fatal device fault is malformed; skipped"]
    assert skipped["device"] == GPU_BDF and f"{GPU_BDF}.{field}" in skipped["error"]
    assert "about 401 digits" in skipped["error"]
