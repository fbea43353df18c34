"""The claim status writer against a failing apiserver: bounded requests, and retries that land.

Every prepare and unprepare queues a status write; while the apiserver fails them (500, 429, a
dropped connection) the writer must neither send one request per queued write as fast as they
come nor give up on a write at the first transient failure. The bound on requests is the one the
retry policy implies (one attempt per ``FLOOR`` seconds at most, whatever the machine's speed);
requests are counted at the fake apiserver.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from driver.claims.status import ClaimStatusWriter
from driver.claims.statusqueue import AsyncStatusWriter
from driver.errors import KubeError
from driver.inventory.model import Inventory
from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient
from driver.plugin import PreparedDevice
from harness.fakeapiserver import FakeApiServer, Fault
from harness.poll import wait_for

pytestmark = pytest.mark.fault

DRIVER = "numadra.dev"
NODE = "node-a"
FLOOR = 0.25
SECONDS = 3.0
ALWAYS = 10**9
PREPARED = [PreparedDevice(("r",), NODE, "gpu-0", (f"{DRIVER}/gpu=gpu-0",))]


def _claim(index: int) -> dict[str, Any]:
    result = {"request": "r", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"c{index}", "namespace": "ns", "uid": f"uid-{index}"},
        "spec": {},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[KubeClient]:
    kube = KubeClient(api.kubeconfig_path, timeout=2.0, connect_timeout=0.5)
    yield kube
    kube.close()


def _status_writer(client: KubeClient, policy: RetryPolicy) -> AsyncStatusWriter:
    def build() -> ClaimStatusWriter:
        return ClaimStatusWriter(
            client, driver_name=DRIVER, inventory=Inventory(), ip_source=lambda _: [], retry=policy
        )

    return AsyncStatusWriter(build)


def _patches(api: FakeApiServer) -> int:
    return sum(r.method == "PATCH" for r in api.requests)


@pytest.mark.parametrize(
    ("fault", "floor"),
    [
        pytest.param(Fault(500, method="PATCH"), FLOOR, id="http-500"),
        pytest.param(Fault(0, method="PATCH"), FLOOR, id="connection-dropped"),
        pytest.param(Fault(429, method="PATCH", retry_after=1), 1.0, id="http-429-retry-after"),
    ],
)
def test_failing_status_writes_are_sent_at_the_policys_pace(
    api: FakeApiServer, client: KubeClient, fault: Fault, floor: float
) -> None:
    """40 claims prepared while every write fails: at most one write attempt per ``floor``."""
    fault.times = ALWAYS
    api.inject_fault(fault)
    status = _status_writer(client, RetryPolicy(floor=min(floor, FLOOR), cap=2.0))
    for index in range(40):
        status.report_prepared(_claim(index), PREPARED)
    time.sleep(SECONDS)
    patches = _patches(api)
    status.close(timeout=0.5)
    assert 2 <= patches <= 2 + int(SECONDS / floor), f"{patches} status writes in {SECONDS} s"


def test_a_write_that_failed_transiently_is_retried_until_it_lands(
    api: FakeApiServer, client: KubeClient
) -> None:
    """Two 500s, then the apiserver is back: the Ready entry is on the claim all the same."""
    api.put_object(_claim(1))
    api.inject_fault(Fault(500, method="PATCH", times=2))
    status = _status_writer(client, RetryPolicy(floor=0.05, cap=0.2))
    status.report_prepared(_claim(1), PREPARED)

    def written() -> list[Any] | None:
        claim = api.get_object("ResourceClaim", "c1", "ns") or {}
        return (claim.get("status") or {}).get("devices")

    try:
        (entry,) = wait_for(written, 10, "the status entry after two failed writes")
    finally:
        status.close()
    assert entry["device"] == "gpu-0" and entry["conditions"][0]["type"] == "Ready"
    assert _patches(api) == 3


def test_a_write_refused_for_good_is_not_retried(api: FakeApiServer, client: KubeClient) -> None:
    """422 (the apiserver will never take it): one attempt, logged, the next write goes on."""
    api.put_object(_claim(2))
    api.inject_fault(Fault(422, method="PATCH"))
    status = _status_writer(client, RetryPolicy(floor=0.05, cap=0.2))
    status.report_prepared(_claim(1), PREPARED)
    status.report_prepared(_claim(2), PREPARED)
    try:
        wait_for(
            lambda: (api.get_object("ResourceClaim", "c2", "ns") or {}).get("status", {}).get("devices"),
            10,
            "the second claim's status",
        )
    finally:
        status.close()
    assert _patches(api) == 2


def test_only_the_apiservers_not_found_makes_a_status_write_moot(
    api: FakeApiServer, client: KubeClient
) -> None:
    """A claim the apiserver says is gone (its NotFound Status naming the claim) needs no status;
    any other 404 (a proxy's or gateway's, a Status naming nothing) is a failed write, reported,
    never taken for "the claim is gone"."""
    writer = ClaimStatusWriter(client, driver_name=DRIVER, inventory=Inventory(), ip_source=lambda _: [])
    writer.clear("ns", "gone", "uid-gone")  # the fake's own NotFound for the claim: nothing to write
    page = b'<html><p>resourceclaims.resource.k8s.io "c1" not found</p></html>'
    api.inject_fault(Fault(404, method="PATCH", body=page))
    api.inject_fault(Fault(404, method="PATCH"))  # a Status, but one that names no claim
    for _ in range(2):
        with pytest.raises(KubeError) as info:
            writer.clear("ns", "c1", "uid-1")
        assert info.value.status == 404
