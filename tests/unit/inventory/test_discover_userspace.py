"""``numadra discover -o table`` says where the NVIDIA GPUs' user space comes from, and why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver.cli import main
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
from tests.unit.inventory.trees import host_tree

UUID = "GPU-12345678-1234-1234-1234-123456789abc"
TOPOLOGY = Topology(
    name="one-nvidia", gpus=(GpuSpec(bus_id="0000:17:00.0", nvidia_minor=0, nvidia_uuid=UUID),)
)


def _table(root: Path, cdi: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    argv = ["discover", "--host-root", str(root), "--node-name", "n", "--cdi-dir", str(cdi), "-o", "table"]
    assert main(argv) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(("nvidia", "    "))]


def test_driver_root_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plain node: the driver root, its version and what it holds."""
    root = write_host_tree(tmp_path / "host", TOPOLOGY)
    write_nvidia_driver(root, NvidiaDriver())
    lines = _table(root, tmp_path / "cdi", capsys)
    assert lines == [
        "nvidia    user space: driver root / (driver 550.54.15: 6 libraries, 3 tools, 2 firmware files,"
        " in /usr/lib/x86_64-linux-gnu)"
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="character devices need root (mknod)")
def test_toolkit_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The toolkit's spec serves every GPU: its file is named."""
    root = write_host_tree(tmp_path / "host", TOPOLOGY)
    write_nvidia_driver(root, NvidiaDriver())
    make_char_devices(root, ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"])
    spec = write_toolkit_spec(
        tmp_path / "cdi/nvidia.yaml", toolkit_spec([ToolkitGpu(0, UUID, 0)], NvidiaDriver(), hook_path=None)
    )
    assert _table(root, tmp_path / "cdi", capsys) == [
        f"nvidia    user space: toolkit spec {spec} (1 GPU(s) by UUID)"
    ]


def test_none_line_with_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Neither source: "none", and each reason on its own line."""
    root = write_host_tree(tmp_path / "host", TOPOLOGY)
    lines = _table(root, tmp_path / "cdi", capsys)
    assert lines[0] == "nvidia    user space: none (CUDA containers get no driver)"
    assert lines[1].startswith("          warning: no NVIDIA toolkit spec (kind nvidia.com/gpu) in ")
    assert lines[2].startswith("          warning: no NVIDIA kernel module version in ")


def test_no_line_without_nvidia_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Hosts without NVIDIA GPUs are not told about NVIDIA's user space."""
    assert not any(line.startswith("nvidia") for line in _table(host_tree("workstation"), tmp_path, capsys))
