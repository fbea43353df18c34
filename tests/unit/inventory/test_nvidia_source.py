"""Without the toolkit's spec: the driver root serves, says what it lacks, or there is nothing, loudly."""

from __future__ import annotations

import os
from pathlib import Path

from driver.inventory.discovery import discover
from driver.inventory.nodeaccess import access_gid
from driver.inventory.nvidia_source import UserspaceSource, choose_source
from driver.inventory.nvidia_toolkit import ToolkitSpecFinder
from driver.inventory.nvidia_userspace import discover_driver_userspace
from harness.hostspec import GpuSpec, Topology
from harness.hosttree import write_host_tree
from harness.nvidia import NvidiaDriver, write_nvidia_driver

TOPOLOGY = Topology(
    name="one-nvidia", gpus=(GpuSpec(bus_id="0000:17:00.0", nvidia_minor=0, nvidia_uuid="GPU-1"),)
)


def _choose(root: Path) -> tuple[UserspaceSource, tuple[str, ...]]:
    gpus = discover(root, use_nvml=False).gpus
    toolkit = ToolkitSpecFinder(str(root), [str(root / "etc/cdi"), str(root / "run/cdi")]).find()
    choice = choose_source(gpus, toolkit, discover_driver_userspace(str(root)))
    return choice.source, choice.warnings


def test_driver_root_serves_quietly(tmp_path: Path) -> None:
    """No toolkit spec but a complete driver root: the normal case on a plain node, no warning."""
    root = write_host_tree(tmp_path, TOPOLOGY)
    write_nvidia_driver(root, NvidiaDriver())
    assert _choose(root) == (UserspaceSource.DRIVER_ROOT, ())


def test_driver_root_without_nvml_names_it(tmp_path: Path) -> None:
    """The driver root lacks libnvidia-ml: it still serves, and the warning names the file."""
    root = write_host_tree(tmp_path, TOPOLOGY)
    write_nvidia_driver(root, NvidiaDriver(libraries=(("libcuda.so", "1"),)))
    source, warnings = _choose(root)
    assert source is UserspaceSource.DRIVER_ROOT
    assert warnings == ("driver root / lacks libnvidia-ml.so.550.54.15 (driver 550.54.15)",)


def test_nothing_anywhere_says_both_reasons(tmp_path: Path) -> None:
    """Neither source: the claim is still prepared (the GPU is there), but never silently."""
    root = write_host_tree(tmp_path, TOPOLOGY)
    write_nvidia_driver(root, NvidiaDriver(libraries=(), binaries=()))
    source, warnings = _choose(root)
    assert source is UserspaceSource.NONE
    assert "no NVIDIA toolkit spec (kind nvidia.com/gpu)" in warnings[0]
    assert str(root / "etc/cdi") in warnings[0]
    assert "no libcuda.so.550.54.15 or libnvidia-ml.so.550.54.15" in warnings[1]


def test_access_gid_only_for_group_only_nodes(tmp_path: Path) -> None:
    """Only a node that its group, not everyone, may open needs that group; root's is never given."""
    node = tmp_path / "dev/dri/renderD128"
    node.parent.mkdir(parents=True)
    node.write_text("")
    os.chown(node, 0, 993)
    for mode, gid in ((0o660, 993), (0o666, None), (0o640, None), (0o600, None)):
        node.chmod(mode)
        assert access_gid(str(tmp_path), "/dev/dri/renderD128") == gid, oct(mode)
    os.chown(node, 0, 0)
    node.chmod(0o660)
    assert access_gid(str(tmp_path), "/dev/dri/renderD128") is None
    assert access_gid(str(tmp_path), "/dev/dri/renderD129") is None
