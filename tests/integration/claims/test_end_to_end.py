"""ClaimsDriver behind the real pieces: the fake apiserver over HTTP and the kubelet gRPC layer."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.claims import ClaimsDriver, claims_journal
from driver.kube.client import KubeClient
from driver.kubelet.claims import ClaimFetcher
from driver.kubelet.server import KubeletPluginServer
from driver.pinning.planner import CpuPlanner
from driver.plugin import ClaimRef
from driver.state.journal import Journal, journal_path
from harness.fakeapiserver import FakeApiServer
from harness.kubeletclient import KubeletClient
from tests.integration.claims._world import (
    DRIVER,
    GPU0,
    NIC0,
    NODE,
    ServedDriver,
    claim,
    cpu_result,
    make_inventory,
    result,
)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory: AF_UNIX socket paths are limited to 107 bytes."""
    root = Path(tempfile.mkdtemp(prefix="cl", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _driver(api: FakeApiServer, root: Path) -> ServedDriver:
    """ClaimsDriver behind the kubelet layer's claim path, reading from ``api`` over HTTP."""
    inventory = make_inventory()
    (root / "cdi").mkdir(exist_ok=True)
    inner = ClaimsDriver(
        driver_name=DRIVER,
        node_name=NODE,
        inventory=lambda: inventory,
        cdi_dir=root / "cdi",
        plugin_dir=root / "plugin",
        journal=claims_journal(
            cdi_dir=root / "cdi", plugin_dir=root / "plugin", driver_name=DRIVER, pool=NODE
        ),
        planner=CpuPlanner(lambda: inventory),
    )
    return ServedDriver(inner, ClaimFetcher(_kube(api)))


def _kube(api: FakeApiServer) -> KubeClient:
    return KubeClient(api.kubeconfig_path, timeout=2.0, connect_timeout=0.5)


def test_prepare_through_fake_apiserver(api: FakeApiServer, short_dir: Path) -> None:
    """Claims are fetched over HTTP; a missing one is a 404 error, the others are prepared."""
    api.put_object(claim("u-1", "one", results=[result("gpu", GPU0)]))
    api.put_object(claim("u-2", "two", results=[cpu_result("cpu", 2)]))
    drv = _driver(api, short_dir)
    refs = [
        ClaimRef("default", "one", "u-1"),
        ClaimRef("default", "two", "u-2"),
        ClaimRef("default", "gone", "u-3"),
    ]
    out = drv.prepare_claims(refs)
    assert out["u-1"].ok, out["u-1"].error
    assert out["u-2"].ok, out["u-2"].error
    assert "ResourceClaim not found in the apiserver" in out["u-3"].error
    gets = [r for r in api.requests if "/resourceclaims/" in r.path]
    assert len(gets) == 3
    api.stop()  # unreachable: new prepares fail per claim, repeats and unprepares need no API
    out = drv.prepare_claims([ClaimRef("default", "three", "u-4")])
    assert "cannot get ResourceClaim" in out["u-4"].error
    assert drv.unprepare_claims(refs[:2]) == {"u-1": "", "u-2": ""}
    drv.close()


def test_prepare_over_kubelet_grpc(api: FakeApiServer, short_dir: Path) -> None:
    """The kubelet's v1 and v1beta1 calls reach ClaimsDriver; devices and CDI IDs come back."""
    api.put_object(claim("u-1", "one", results=[result("gpu", GPU0), result("nic", NIC0)]))
    drv = _driver(api, short_dir)
    (short_dir / "reg").mkdir()
    server = KubeletPluginServer(
        driver_name=DRIVER,
        node_name=NODE,
        registrar_dir=short_dir / "reg",
        plugin_dir=short_dir / "plugin",
        plugin=drv.inner,
        claim_source=_kube(api),
    )
    server.start()
    try:
        with KubeletClient() as kubelet:
            reg = kubelet.register(server.registration_socket)
            ref = ClaimRef("default", "one", "u-1")
            v1 = kubelet.prepare(reg.info.endpoint, [ref], "v1").claims["u-1"]
            assert v1.error == ""
            assert [d.device_name for d in v1.devices] == [GPU0, NIC0]
            # the metadata mount rides on the claim's own spec: one CDI ID per device
            assert list(v1.devices[0].cdi_device_ids) == [f"{DRIVER}/claim=u-1-{GPU0}"]
            beta = kubelet.prepare(reg.info.endpoint, [ref], "v1beta1").claims["u-1"]
            assert [list(d.cdi_device_ids) for d in beta.devices] == [
                list(d.cdi_device_ids) for d in v1.devices
            ]
            assert kubelet.unprepare(reg.info.endpoint, [ref], "v1").claims["u-1"].error == ""
    finally:
        server.stop(grace=0)
        drv.close()
    journal = Journal(journal_path(short_dir / "plugin"), read_only=True)
    journal.load()
    assert len(journal) == 0
