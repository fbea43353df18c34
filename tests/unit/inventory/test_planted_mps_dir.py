"""The MPS pipe directory lives in /tmp, which anyone may write: what a planted one gets a container.

``/tmp/nvidia-mps`` is mounted read-write into every CUDA container that takes the driver root's
files. These tests play a user of the node who plants it before numadra looks: as a link to
``/etc`` (root's or their own), or as a directory of their own. Each plant is left out, named in
:attr:`DriverUserspace.refused`, and the rest of the driver's files are still mounted. The
directory a real MPS daemon makes (root's, in the sticky ``/tmp``) is still mounted.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver.inventory.discovery import discover
from driver.inventory.nvidia_source import UserspaceSource, choose_source
from driver.inventory.nvidia_toolkit import ToolkitSpecFinder
from driver.inventory.nvidia_userspace import IPC_OPTIONS, DriverUserspace, discover_driver_userspace
from harness.hostspec import GpuSpec, Topology
from harness.hosttree import write_host_tree
from harness.nvidia import (
    NvidiaDriver,
    ToolkitGpu,
    make_char_devices,
    toolkit_spec,
    write_nvidia_driver,
    write_toolkit_spec,
)

V = "550.54.15"
MPS = "/tmp/nvidia-mps"
USER = 1000  # a user of the node, not root
UUID = "GPU-11111111-2222-3333-4444-555555555555"
TOPOLOGY = Topology(
    name="one-nvidia", gpus=(GpuSpec(bus_id="0000:17:00.0", nvidia_minor=0, nvidia_uuid=UUID),)
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting files of another user needs root")


def _host(tmp_path: Path) -> Path:
    """A host with the driver installed and the usual sticky, world-writable /tmp."""
    root = write_host_tree(tmp_path / "host", TOPOLOGY)
    write_nvidia_driver(root, NvidiaDriver(version=V))
    (root / "tmp").mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/shadow").write_text("root:$6$secret\n")
    return root


def _ipc(found: DriverUserspace) -> dict[str, str]:
    return {m.container_path: m.host_path for m in found.mounts if m.kind == "ipc"}


@pytest.mark.parametrize(
    ("owner", "reason"),
    [
        (USER, f"{MPS} is owned by uid {USER}, not root"),
        (0, f"{MPS} is a symbolic link in /tmp, which others can write"),
    ],
    ids=["user-owned link", "root-owned link"],
)
def test_mps_dir_planted_as_a_link_to_etc_is_not_mounted(tmp_path: Path, owner: int, reason: str) -> None:
    """/tmp/nvidia-mps -> /etc: the container does not get the host's /etc read-write.

    The link is refused whoever owns it: no link is followed in a directory others can write.
    """
    root = _host(tmp_path)
    (root / MPS.strip("/")).symlink_to("/etc")
    os.lchown(root / MPS.strip("/"), owner, owner)
    found = discover_driver_userspace(str(root))
    assert found.usable, found.problem
    assert MPS not in _ipc(found)
    assert all(not m.host_path.startswith("/etc") for m in found.mounts)
    assert found.refused == (f"{MPS} (ipc): {reason}",)
    assert found.count("library") > 0  # the rest of the driver is still given


def test_mps_dir_owned_by_a_user_is_not_mounted(tmp_path: Path) -> None:
    """A real directory /tmp/nvidia-mps made by a user: its owner could swap it for a link."""
    root = _host(tmp_path)
    (root / MPS.strip("/")).mkdir()
    os.chown(root / MPS.strip("/"), USER, USER)
    found = discover_driver_userspace(str(root))
    assert MPS not in _ipc(found)
    assert found.refused == (f"{MPS} (ipc): {MPS} is owned by uid {USER}, not root",)


def test_mps_dir_of_the_root_daemon_in_sticky_tmp_is_mounted(tmp_path: Path) -> None:
    """What a real MPS daemon makes: root's directory in the sticky /tmp, mounted read-write.

    In a sticky directory only the entry's owner (root) can rename or remove it, so no user can
    swap it between this check and the runtime's mount.
    """
    root = _host(tmp_path)
    (root / MPS.strip("/")).mkdir()
    found = discover_driver_userspace(str(root))
    assert _ipc(found) == {MPS: MPS}
    assert [m.options for m in found.mounts if m.kind == "ipc"] == [IPC_OPTIONS]
    assert found.refused == ()


def test_mps_dir_under_a_tmp_without_the_sticky_bit_is_not_mounted(tmp_path: Path) -> None:
    """A world-writable /tmp without the sticky bit: anyone may rename root's directory away."""
    root = _host(tmp_path)
    (root / "tmp").chmod(0o777)
    (root / MPS.strip("/")).mkdir()
    found = discover_driver_userspace(str(root))
    assert MPS not in _ipc(found)
    assert found.refused == (f"{MPS} (ipc): /tmp is writable by others (mode 777, not sticky)",)


def _choose(root: Path) -> tuple[UserspaceSource, tuple[str, ...]]:
    gpus = discover(root, use_nvml=False).gpus
    toolkit = ToolkitSpecFinder(str(root), [str(root / "etc/cdi")]).find()
    choice = choose_source(gpus, toolkit, discover_driver_userspace(str(root)))
    return choice.source, choice.warnings


def test_a_refused_file_is_a_warning_of_the_claims_gpus(tmp_path: Path) -> None:
    """The user is told: the source is still the driver root, and the warning names the path."""
    root = _host(tmp_path)
    (root / MPS.strip("/")).symlink_to("/etc")
    source, warnings = _choose(root)
    assert source is UserspaceSource.DRIVER_ROOT
    why = f"{MPS} is a symbolic link in /tmp, which others can write"
    assert warnings == (f"driver root file not mounted: {MPS} (ipc): {why}",)


def test_a_toolkit_spec_that_mounts_a_planted_mps_dir_is_not_used(tmp_path: Path) -> None:
    """The toolkit's spec mounts /tmp/nvidia-mps too; planted, its devices are not returned.

    numadra cannot edit another program's spec, only decline to name its devices: the claim
    falls back to the driver root, whose files leave the planted directory out.
    """
    root = _host(tmp_path)
    (root / MPS.strip("/")).symlink_to("/etc")
    make_char_devices(root, ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"))
    hook = root / "usr/bin/nvidia-cdi-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    spec = toolkit_spec([ToolkitGpu(0, UUID, 0)], NvidiaDriver(version=V))
    ipc = {"hostPath": MPS, "containerPath": MPS, "options": ["nosuid", "nodev", "rbind", "rprivate"]}
    spec["containerEdits"]["mounts"].append(ipc)
    write_toolkit_spec(root / "etc/cdi/nvidia.yaml", spec)
    source, warnings = _choose(root)
    assert source is UserspaceSource.DRIVER_ROOT
    assert warnings[0].startswith("toolkit spec not used: ")
    assert f"mount source {MPS} is not given to containers: {MPS} is a symbolic link in /tmp" in warnings[0]
    assert any(w.startswith(f"driver root file not mounted: {MPS} (ipc)") for w in warnings[1:])
    (root / MPS.strip("/")).unlink()
    (root / MPS.strip("/")).mkdir()  # what the root daemon makes: the toolkit's spec serves again
    assert _choose(root) == (UserspaceSource.TOOLKIT, ())
