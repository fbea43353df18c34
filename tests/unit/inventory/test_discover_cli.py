"""``numadra discover`` on generated trees: output formats, the topology table and exit codes."""

from __future__ import annotations

import json

import pytest
import yaml

from driver.cli import main
from driver.inventory.model import Cpu, Inventory, NumaNode
from driver.presentation.table import render_table
from driver.slices.validation import validate_slices
from tests.unit.inventory.trees import host_tree

GiB = 1024**3


def test_json_is_a_list_of_valid_slices(capsys: pytest.CaptureFixture[str]) -> None:
    """-o json prints a v1 List of complete, valid ResourceSlices."""
    root = str(host_tree("huge"))
    assert main(["discover", "--host-root", root, "--node-name", "big-1", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    assert [s["metadata"]["name"] for s in doc["items"]] == [f"big-1-numadra-dev-{i}" for i in range(3)]
    assert validate_slices(doc["items"]) == []


def test_yaml_matches_json(capsys: pytest.CaptureFixture[str]) -> None:
    """-o yaml carries the same objects as -o json, with the reserved CPUs and driver name applied."""
    args = ["discover", "--host-root", str(host_tree("workstation")), "--node-name", "ws"]
    args += ["--driver-name", "gpu.example.com", "--reserved-cpus", "0-1"]
    assert main([*args, "-o", "yaml"]) == 0
    from_yaml = yaml.safe_load(capsys.readouterr().out)
    assert main([*args, "-o", "json"]) == 0
    assert from_yaml == json.loads(capsys.readouterr().out)
    cpu = from_yaml["items"][0]["spec"]["devices"][-1]
    assert (from_yaml["items"][0]["spec"]["driver"], cpu["capacity"]["cpus"]["value"]) == (
        "gpu.example.com",
        "14",
    )


def test_node_name_from_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --node-name, NODE_NAME names the node and pool."""
    monkeypatch.setenv("NODE_NAME", "from-env")
    assert main(["discover", "--host-root", str(host_tree("cloud_vm")), "--node-allocatable"]) == 0
    item = json.loads(capsys.readouterr().out)["items"][0]
    assert item["spec"]["pool"]["name"] == "from-env"
    assert "nodeAllocatableResources" in item["spec"]["devices"][-1]


def test_table_shows_topology(capsys: pytest.CaptureFixture[str]) -> None:
    """-o table lists each NUMA node with CPUs (cores x threads), memory, hugepages, GPUs and NICs."""
    assert main(["discover", "--host-root", str(host_tree("dgx")), "-o", "table"]) == 0
    out = capsys.readouterr().out
    assert "total     224 CPUs, 2.0 TiB NUMA-node memory, 2 NUMA node(s), 8 GPU(s), 72 NIC(s)" in out
    assert "NUMA node 1\n  cpus      112 (56-111,168-223): 56 cores x 2 threads, socket 1" in out
    assert "  hugepages 2Mi x 1024, 1Gi x 16" in out
    assert (
        "  gpu  gpu-0000-98-00-0  nvidia NVIDIA H100 80GB HBM3  index 4  root pci0000:95  /dev/nvidia4" in out
    )
    assert (
        "  nic  nic-0000-97-00-0  enp151s0np0  mlx5_core  b8:ce:f6:00:04:00  400000 Mb/s  up  PF, 16 VFs"
        in out
    )
    assert "NUMA node unknown" not in out


@pytest.mark.parametrize(
    ("host_bytes", "expected"),
    [
        pytest.param(
            24 * GiB, "6 CPUs, 12.0 GiB NUMA-node memory (host MemTotal 24.0 GiB), 1 NUMA", id="differs"
        ),
        pytest.param(12 * GiB, "6 CPUs, 12.0 GiB NUMA-node memory, 1 NUMA", id="same"),
        pytest.param(None, "6 CPUs, 12.0 GiB NUMA-node memory, 1 NUMA", id="unknown"),
    ],
)
def test_table_total_memory_says_whose(host_bytes: int | None, expected: str) -> None:
    """The total line names the NUMA nodes' memory and adds the host MemTotal only when it differs."""
    cpus = tuple(Cpu(i, i, 0, 0, 0, 0, (i,)) for i in range(6))
    node = NumaNode(0, tuple(range(6)), 12 * GiB)
    out = render_table(Inventory(cpus=cpus, numa_nodes=(node,), memory_total_bytes=host_bytes))
    assert expected in out.splitlines()[0]
    assert "  memory    12.0 GiB" in out


def test_table_unknown_numa_section(capsys: pytest.CaptureFixture[str]) -> None:
    """Devices without a NUMA node get their own section; the synthesized node 0 holds the CPUs."""
    assert main(["discover", "--host-root", str(host_tree("cloud_vm")), "-o", "table"]) == 0
    out = capsys.readouterr().out
    before, _, after = out.partition("NUMA node unknown (firmware reports none)")
    assert "cpus      4 (0-3): 4 cores x 1 thread" in before
    assert "gpu  gpu-0000-00-04-0" in after and "nic  nic-0000-00-03-0  eth0  virtio_net" in after


def test_table_hostile_is_clipped_and_printable(capsys: pytest.CaptureFixture[str]) -> None:
    """Hostile product names are shortened and control characters dropped in the table."""
    assert (
        main(["discover", "--host-root", str(host_tree("hostile")), "-o", "table", "--reserved-cpus", "0"])
        == 0
    )
    out = capsys.readouterr().out
    assert "\x00" not in out
    assert "Ü" * 47 + "…" in out
    assert "cpus      none (memory-only node)" in out
    assert "isolated 2-3" in out and "reserved 0" in out


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["--reserved-cpus", "a-b"], 2, "--reserved-cpus", id="bad-cpulist"),
        pytest.param(["--node-name", "Not_Valid"], 2, "--node-name", id="bad-node"),
        pytest.param(["--driver-name", "-bad-"], 2, "--driver-name", id="bad-driver"),
        pytest.param(["--host-root", "/nonexistent/root"], 1, "/nonexistent/root", id="bad-root"),
        pytest.param(["-o", "xml"], 2, "invalid choice", id="bad-format"),
    ],
)
def test_exit_codes(args: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Bad usage exits 2, an unreadable host root exits 1; each with a one-line reason."""
    try:
        rc = main(["discover", "--node-name", "n", *args])
    except SystemExit as exc:
        rc = int(str(exc.code))
    assert rc == code
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
