"""The VM's QEMU command line and the KVM check, without booting anything (these run anywhere)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vm.machine import TOPOLOGY, kvm_backend_problem, qemu_argv


def _argv(kvm: bool) -> list[str]:
    paths = Path("/cache"), Path("/repo"), Path("/site"), Path("/out")
    return qemu_argv("qemu-system-x86_64", TOPOLOGY, *paths, kvm=kvm)


def _values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def test_every_pci_device_outside_the_nic_chain_names_the_root_bus() -> None:
    """QEMU puts a device without ``bus=`` on the newest PCIe bus, the expander's, which takes
    bridges only ("Only PCI/PCIe bridges can be plugged into pxb-pcie"): each device names one."""
    devices = _values(_argv(kvm=True), "-device")
    assert "-virtfs" not in _argv(kvm=True)  # -virtfs cannot name a bus
    for device in devices:
        assert ",bus=" in device, device
    on_expander = [d for d in devices if "bus=pcie.0" not in d]
    assert [d.split(",")[0] for d in on_expander] == ["pcie-root-port", TOPOLOGY.nic.model]


def test_numa_nodes_distances_and_hugepages_reach_qemu_and_the_kernel() -> None:
    """One memory backend and -numa node per node (a memory-only node has no cpus=), every SLIT
    pair, the per-node hugepages on the kernel command line, the NIC's node on the expander."""
    argv = _argv(kvm=False)
    numa = _values(argv, "-numa")
    assert numa[:3] == [
        "node,nodeid=0,cpus=0-1,memdev=m0",
        "node,nodeid=1,cpus=2-3,memdev=m1",
        "node,nodeid=2,memdev=m2",
    ]
    assert numa[3:] == ["dist,src=0,dst=1,val=21", "dist,src=0,dst=2,val=28", "dist,src=1,dst=2,val=17"]
    assert _values(argv, "-m") == ["2048M"]
    (cmdline,) = _values(argv, "-append")
    assert "hugepagesz=2M hugepages=0:8,1:16" in cmdline
    assert any(d.startswith("pxb-pcie,") and "numa_node=1" in d for d in _values(argv, "-device"))
    assert _values(argv, "-machine") == ["q35,accel=tcg"]


@pytest.mark.parametrize(
    ("modules", "problem"),
    [
        pytest.param(["kvm", "kvm_intel"], None, id="intel"),
        pytest.param(["kvm", "kvm_amd"], None, id="amd"),
        pytest.param(["kvm", "kvm_pvm"], "modules: kvm, kvm_pvm", id="pvm"),
        pytest.param([], "modules: none", id="none"),
    ],
)
def test_kvm_backend(tmp_path: Path, modules: list[str], problem: str | None) -> None:
    """Only hardware KVM boots a stock kernel; PVM's /dev/kvm answers the API ioctl but hangs one."""
    for module in [*modules, "ext4"]:
        (tmp_path / module).mkdir()
    found = kvm_backend_problem(tmp_path)
    assert found == problem if problem is None else problem in str(found)
