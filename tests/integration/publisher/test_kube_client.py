"""KubeClient against the fake apiserver over real HTTP: calls, selectors and the error mapping."""

from __future__ import annotations

import http.client
import threading
import time
from typing import Any
from urllib.parse import urlencode

import pytest

from driver.errors import KubeError
from driver.kube.client import KubeClient, error_kind, slice_field_selector
from driver.kube.types import ClaimGetter
from harness.fakeapiserver import FakeApiServer, Fault

from .conftest import DRIVER, NODE


def _slice(name: str, node: str = NODE, driver: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }


def test_client_implements_claim_getter(client: KubeClient) -> None:
    """The client satisfies the ClaimGetter protocol the claims layer depends on."""
    assert isinstance(client, ClaimGetter)


def test_get_claim_returns_plain_json(api: FakeApiServer, client: KubeClient) -> None:
    """A claim GET returns the wire JSON (camelCase dicts), not model objects."""
    meta = {"name": "c1", "namespace": "ns1"}
    api.put_object(
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": {}}
    )
    claim = client.get_resource_claim("ns1", "c1")
    assert type(claim) is dict
    assert claim["metadata"]["name"] == "c1" and claim["metadata"]["uid"]


def test_list_filters_by_node_and_driver(api: FakeApiServer, client: KubeClient) -> None:
    """The field selector returns only this node's slices of this driver."""
    for obj in (_slice("mine"), _slice("other-node", node="node-b"), _slice("other-driver", driver="x.dev")):
        client.create_resource_slice(obj)
    items, rv = client.list_resource_slices(field_selector=slice_field_selector(NODE, DRIVER))
    assert [i["metadata"]["name"] for i in items] == ["mine"]
    assert int(rv) > 0
    assert "fieldSelector=spec.nodeName" in api.requests[-1].query


def test_update_with_stale_resource_version_conflicts(client: KubeClient) -> None:
    """A PUT carrying an old resourceVersion is refused with 409, marked transient."""
    stored = client.create_resource_slice(_slice("s1"))
    client.update_resource_slice(stored)
    with pytest.raises(KubeError) as info:
        client.update_resource_slice(stored)
    assert info.value.status == 409 and info.value.transient
    assert error_kind(info.value) == "conflict"


def test_delete_precondition_mismatch_conflicts(client: KubeClient) -> None:
    """A DELETE with a wrong uid precondition is refused and the slice stays."""
    stored = client.create_resource_slice(_slice("s1"))
    with pytest.raises(KubeError) as info:
        client.delete_resource_slice("s1", uid="not-the-uid")
    assert info.value.status == 409
    client.delete_resource_slice("s1", uid=stored["metadata"]["uid"])
    assert client.list_resource_slices()[0] == []


def test_watch_streams_deletions(api: FakeApiServer, client: KubeClient) -> None:
    """A watch from the list's resourceVersion sees the kubelet's wipe as DELETED events."""
    client.create_resource_slice(_slice("s1"))
    _, rv = client.list_resource_slices()
    watch = client.watch_resource_slices(
        field_selector=slice_field_selector(NODE, DRIVER), resource_version=rv
    )
    seen: list[tuple[str, str]] = []

    def consume() -> None:
        for kind, obj in watch:
            seen.append((kind, obj["metadata"]["name"]))

    thread = threading.Thread(target=consume)
    thread.start()
    assert api.wipe_slices(NODE) == 1
    deadline = time.monotonic() + 3
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    watch.close()
    thread.join(2)
    assert seen == [("DELETED", "s1")]
    assert not thread.is_alive()


def test_watch_from_compacted_version_raises_gone(api: FakeApiServer, client: KubeClient) -> None:
    """A watch from a compacted resourceVersion ends with a 410 KubeError (caller re-lists)."""
    client.create_resource_slice(_slice("s1"))
    _, rv = client.list_resource_slices()
    client.create_resource_slice(_slice("s2"))
    api.compact()
    with pytest.raises(KubeError) as info:
        list(client.watch_resource_slices(resource_version=str(int(rv) - 1)))
    assert info.value.status == 410 and error_kind(info.value) == "gone"
    assert "too old resource version" in str(info.value)  # the Status message, not a bare code


def test_apply_claim_status_sends_ssa(api: FakeApiServer, client: KubeClient) -> None:
    """Status goes out as server-side apply on /status with our field manager and force."""
    result = {"request": "nic", "driver": DRIVER, "pool": NODE, "device": "nic-0"}
    api.put_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c1", "namespace": "ns"},
            "status": {"allocation": {"devices": {"results": [result]}}},
        }
    )
    entry = {"driver": DRIVER, "pool": NODE, "device": "nic-0"}
    client.apply_claim_status("ns", "c1", [entry], field_manager=DRIVER)
    claim = api.get_object("ResourceClaim", "c1", "ns")
    assert claim is not None and claim["status"]["devices"] == [entry]
    last = api.requests[-1]
    assert last.method == "PATCH" and last.path.endswith("/resourceclaims/c1/status")
    assert f"fieldManager={DRIVER}" in last.query and "force=true" in last.query


@pytest.mark.parametrize(
    ("fault", "status", "transient", "kind"),
    [
        pytest.param(Fault(404), 404, False, "not_found", id="404"),
        pytest.param(Fault(409), 409, True, "conflict", id="409"),
        pytest.param(Fault(422), 422, False, "invalid", id="422"),
        pytest.param(Fault(500), 500, True, "server", id="500"),
        pytest.param(Fault(0), None, True, "unreachable", id="connection-dropped"),
        pytest.param(Fault(200, delay=1.5), None, True, "timeout", id="timeout"),
    ],
)
def test_error_mapping(
    api: FakeApiServer, fault: Fault, status: int | None, transient: bool, kind: str
) -> None:
    """Each apiserver failure maps to one KubeError with verb, resource, name and status."""
    client = KubeClient(api.kubeconfig_path, timeout=0.5, connect_timeout=0.5)
    fault.times = 5  # the client's single transport retry must not slip past the fault
    api.inject_fault(fault)
    with pytest.raises(KubeError) as info:
        client.get_node(NODE)
    err = info.value
    assert (err.verb, err.resource, err.name) == ("get", "nodes", NODE)
    assert err.status == status and err.transient is transient
    assert error_kind(err) == kind
    assert NODE in str(err)


def test_connection_refused_maps_to_unreachable(api: FakeApiServer, client: KubeClient) -> None:
    """A stopped apiserver gives a transient KubeError without an HTTP status: the refusal itself,
    not a timeout waited out."""
    api.stop()
    with pytest.raises(KubeError) as info:
        client.get_node(NODE)
    assert info.value.status is None and info.value.transient
    assert "refused" in str(info.value).lower()
    assert error_kind(info.value) == "unreachable"
    api.start()
    assert client.get_node(NODE)["metadata"]["name"] == NODE


def test_fake_enforces_64_devices_with_taints(client: KubeClient) -> None:
    """The fake refuses 65 devices in a slice once one is tainted (so re-split tests mean something)."""
    obj = _slice("big")
    obj["spec"]["devices"] = [{"name": f"d{k}"} for k in range(65)]
    client.create_resource_slice(obj)
    obj["metadata"]["name"] = "big-tainted"
    obj["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    with pytest.raises(KubeError) as info:
        client.create_resource_slice(obj)
    assert info.value.status == 422 and "at most 64" in str(info.value)


def test_label_selector_and_delete_collection(api: FakeApiServer, client: KubeClient) -> None:
    """LIST honours label selectors; DELETE on the collection is the kubelet's wipe."""
    labelled = _slice("labelled")
    labelled["metadata"]["labels"] = {"tier": "a"}
    client.create_resource_slice(labelled)
    client.create_resource_slice(_slice("plain"))
    items, _ = client.list_resource_slices(label_selector="tier=a")
    assert [i["metadata"]["name"] for i in items] == ["labelled"]
    conn = http.client.HTTPConnection(api.host, api.port)  # the kubelet's wipe, as it sends it
    selector = urlencode({"fieldSelector": slice_field_selector(NODE, DRIVER)})
    conn.request("DELETE", f"/apis/resource.k8s.io/v1/resourceslices?{selector}")
    assert conn.getresponse().status == 200
    conn.close()
    assert api.objects("ResourceSlice") == []
