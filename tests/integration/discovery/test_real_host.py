"""Discovery on the real machine the tests run on: it must find what the kernel guarantees."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from kubernetes.client import ApiClient

from driver.inventory.discovery import discover
from driver.inventory.model import Inventory
from driver.slices.builder import build_slices
from driver.slices.validation import validate_slices

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _pci_interfaces() -> list[str]:
    """Interfaces whose device is a PCI function (or a virtio child of one), resolved independently."""
    out = []
    net = Path("/sys/class/net")
    for iface in sorted(net.iterdir()) if net.is_dir() else []:
        device = iface / "device"
        if not device.exists():
            continue
        real = device.resolve()
        if _BDF.match(real.name) or (real.name.startswith("virtio") and _BDF.match(real.parent.name)):
            out.append(iface.name)
    return out


def test_real_host_inventory() -> None:
    """The live host has online CPUs, memory on its NUMA nodes, and every PCI NIC found."""
    inv = discover("/")
    print(f"\nreal host: {len(inv.cpus)} CPUs, {len(inv.numa_nodes)} NUMA node(s)")
    print(f"GPUs {[g.name for g in inv.gpus]}")
    print(f"NICs {[(n.name, n.interface_name, n.driver) for n in inv.nics]}")
    assert len(os.sched_getaffinity(0)) <= len(inv.cpus) <= (os.cpu_count() or 1)
    assert sum(n.memory_bytes for n in inv.numa_nodes) > 0
    assert sorted(c.id for c in inv.cpus) == sorted(c for n in inv.numa_nodes for c in n.cpus)
    assert {n.interface_name for n in inv.nics} >= set(_pci_interfaces()) - _duplicates(inv)


def _duplicates(inv: Inventory) -> set[str]:
    """Interfaces that share a PCI function with another one (only the first is a device)."""
    seen: dict[str, str] = {}
    dup: set[str] = set()
    for name in _pci_interfaces():
        real = (Path("/sys/class/net") / name / "device").resolve()
        key = real.parent.name if real.name.startswith("virtio") else real.name
        if key in seen:
            dup.add(name)
        seen.setdefault(key, name)
    return dup


def test_real_host_slices_are_valid_and_model_compatible() -> None:
    """The live host's slices pass the validator and the kubernetes client models unchanged."""
    slices = build_slices(discover("/"), node_name="ci-node", node_allocatable=True)
    assert validate_slices(slices) == []
    client = ApiClient()
    for s in slices:
        model = client.deserialize(json.dumps(s), "V1ResourceSlice", "application/json")
        assert client.sanitize_for_serialization(model) == s


def test_cli_table_on_real_host() -> None:
    """``numadra discover -o table`` prints the host's CPUs, memory and PCI NICs, exit code 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "driver.cli", "discover", "-o", "table"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    inv = discover("/")
    assert f"total     {len(inv.cpus)} CPUs" in proc.stdout
    assert re.search(r"^  cpus      \d+ \(", proc.stdout, re.MULTILINE)
    assert re.search(r"^  memory    [0-9.]+ [KMGTP]iB$", proc.stdout, re.MULTILINE)
    mem_total_kib = int(re.findall(r"^MemTotal:\s+(\d+) kB$", Path("/proc/meminfo").read_text(), re.M)[0])
    assert inv.memory_total_bytes == mem_total_kib * 1024  # the host total, whatever the nodes say
    for iface in set(_pci_interfaces()) - _duplicates(inv):
        assert f"  {iface}  " in proc.stdout


def test_cli_json_on_real_host() -> None:
    """``numadra discover -o json`` prints a List whose pool is the node name given."""
    proc = subprocess.run(
        [sys.executable, "-m", "driver.cli", "discover", "--node-name", "ci-node", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "List" and doc["items"][0]["spec"]["pool"]["name"] == "ci-node"
    assert validate_slices(doc["items"]) == []
