"""ClaimStatusWriter against the fake apiserver: Ready + networkData written by SSA, cleared on unprepare."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from driver.claims.status import ClaimStatusWriter
from driver.health.signals import Reading, SignalReader
from driver.inventory.discovery import discover
from driver.inventory.model import DeviceKind, Inventory, pci_device_name
from driver.kube.client import KubeClient
from driver.plugin import DeviceHealth, HealthState, PreparedDevice
from harness.fakeapiserver import FakeApiServer
from harness.hosttree import write_host_tree
from harness.topologies import cloud_vm

from .conftest import DRIVER, NODE
from .hosts import GPU_BDF, NIC_BDF, NIC_IF, health_topology

NIC = pci_device_name(DeviceKind.NIC, NIC_BDF)
GPU = pci_device_name(DeviceKind.GPU, GPU_BDF)
IPS = {NIC_IF: ["192.0.2.5/24", "2001:db8::5/64"]}
OTHER = {"driver": "other.example.com", "pool": "p", "device": "d0"}


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    return discover(write_host_tree(tmp_path / "host", health_topology()), use_nvml=False)


def _claim(api: FakeApiServer) -> dict[str, Any]:
    results = [
        {"request": "nic", "driver": DRIVER, "pool": NODE, "device": NIC},
        {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": GPU},
        {"request": "x", **OTHER},
    ]
    return api.put_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "net", "namespace": "team", "generation": 1},
            "spec": {},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )


def _writer(client: KubeClient, inventory: Inventory, ips: dict[str, list[str]] = IPS) -> ClaimStatusWriter:
    return ClaimStatusWriter(
        client, driver_name=DRIVER, inventory=inventory, ip_source=lambda i: ips.get(i, [])
    )


def _prepared(*names: str) -> list[PreparedDevice]:
    return [PreparedDevice(("r",), NODE, n, (f"{DRIVER}/dev={n}",)) for n in names]


def test_prepared_nic_claim_gets_ready_and_network_data(
    api: FakeApiServer, client: KubeClient, inventory: Inventory
) -> None:
    """Each prepared device gets a complete Ready condition; the NIC also gets networkData."""
    claim = _claim(api)
    _writer(client, inventory).report_prepared(claim, _prepared(NIC, GPU))
    stored = api.get_object("ResourceClaim", "net", "team")
    assert stored is not None
    devices = {d["device"]: d for d in stored["status"]["devices"]}
    assert set(devices) == {NIC, GPU}
    (ready,) = devices[NIC]["conditions"]
    assert {k: ready[k] for k in ("type", "status", "reason", "observedGeneration")} == {
        "type": "Ready",
        "status": "True",
        "reason": "Prepared",
        "observedGeneration": 1,
    }
    assert ready["message"] and ready["lastTransitionTime"].endswith("Z")
    assert devices[NIC]["networkData"] == {
        "interfaceName": NIC_IF,
        "ips": IPS[NIC_IF],
        "hardwareAddress": "0c:42:a1:00:00:01",
    }
    assert "networkData" not in devices[GPU]
    assert devices[GPU]["data"] == {"pciBusID": GPU_BDF, "numaNode": 0}
    last = api.requests[-1]
    assert last.method == "PATCH" and f"fieldManager={DRIVER}" in last.query


def test_unprepare_clears_only_our_entries(
    api: FakeApiServer, client: KubeClient, inventory: Inventory
) -> None:
    """clear() removes every entry we applied and leaves another driver's entry alone."""
    claim = _claim(api)
    client.apply_claim_status("team", "net", [OTHER], field_manager="other.example.com")
    writer = _writer(client, inventory)
    writer.report_prepared(claim, _prepared(NIC))
    writer.clear("team", "net")
    stored = api.get_object("ResourceClaim", "net", "team")
    assert stored is not None
    assert stored["status"]["devices"] == [OTHER]


@pytest.mark.parametrize("by_uid", [True, False], ids=["by-uid", "by-name"])
def test_a_cleared_claim_gets_no_more_health_writes(
    api: FakeApiServer, client: KubeClient, inventory: Inventory, by_uid: bool
) -> None:
    """After clear() (with the claim's UID, or only its name) a health change of its device writes
    nothing for it; before, the same change re-applies its entries."""
    claim = _claim(api)
    writer = _writer(client, inventory)
    writer.report_prepared(claim, _prepared(NIC))
    api.clear_requests()
    writer.set_health([DeviceHealth(NODE, NIC, HealthState.UNHEALTHY, "NoCarrier")])
    assert [r.method for r in api.writes()] == ["PATCH"]  # still reported: re-applied
    writer.clear("team", "net", claim["metadata"]["uid"] if by_uid else "")
    api.clear_requests()
    writer.set_health([DeviceHealth(NODE, NIC, HealthState.HEALTHY)])
    assert api.writes() == []


def test_only_prepared_devices_of_our_driver_are_reported(
    api: FakeApiServer, client: KubeClient, inventory: Inventory
) -> None:
    """A device we did not prepare, or another driver's result, gets no entry."""
    claim = _claim(api)
    entries = _writer(client, inventory).report_prepared(claim, _prepared(GPU, "gpu-not-allocated"))
    assert [e["device"] for e in entries] == [GPU]


def test_ip_limit_is_respected(api: FakeApiServer, client: KubeClient, inventory: Inventory) -> None:
    """An interface with 20 addresses reports the first 16 (the API maximum) and the write succeeds."""
    many = {NIC_IF: [f"10.0.0.{k}/24" for k in range(20)]}
    (entry,) = _writer(client, inventory, many).report_prepared(_claim(api), _prepared(NIC))
    assert entry["networkData"]["ips"] == many[NIC_IF][:16]


def test_deleted_claim_is_not_an_error(api: FakeApiServer, client: KubeClient, inventory: Inventory) -> None:
    """Clearing the status of a claim that is already gone succeeds quietly: the apply is sent,
    its 404 raises nothing and logs one info line, no warning; nothing is created, and the writer
    goes on writing for other claims."""
    writer = _writer(client, inventory)
    with capture_logs() as logs:
        writer.clear("team", "gone")
    assert [(r.method, r.path) for r in api.requests] == [
        ("PATCH", "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/gone/status")
    ]
    assert api.get_object("ResourceClaim", "gone", "team") is None
    assert [e["event"] for e in logs] == ["claim gone, no status to write"]
    assert logs[0]["log_level"] == "info" and logs[0]["claim"] == "team/gone"
    writer.report_prepared(_claim(api), _prepared(NIC))
    assert api.writes()[-1].path.endswith("/namespaces/team/resourceclaims/net/status")


def test_virtio_nic_network_data_is_read_from_its_live_netdev(tmp_path: Path) -> None:
    """A virtio NIC's netdev (under its virtio child) is found: renamed interface and new MAC are reported."""
    root = write_host_tree(tmp_path / "host", cloud_vm)
    inventory = discover(root, use_nvml=False)
    (nic,) = inventory.nics
    net = root / "sys/bus/pci/devices" / nic.pci.bus_id / "virtio2/net"
    (net / "eth0").rename(net / "ens4")
    (net / "ens4/address").write_text("42:01:0a:80:00:99\n")
    writer = ClaimStatusWriter(
        _NoApi(),
        driver_name=DRIVER,
        inventory=inventory,
        host_root=str(root),
        ip_source=lambda i: IPS.get(i, []),
    )
    claim = {
        "status": {
            "allocation": {"devices": {"results": [{"driver": DRIVER, "pool": NODE, "device": nic.name}]}}
        }
    }
    (entry,) = writer.entries(claim, _prepared(nic.name))
    assert entry["networkData"] == {"interfaceName": "ens4", "hardwareAddress": "42:01:0a:80:00:99"}
    assert SignalReader(str(root), use_nvml=False).read(nic) == Reading(HealthState.HEALTHY)


class _NoApi:
    """entries() makes no call; any call would fail the test."""

    def apply_claim_status(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("no apiserver call expected")
