"""Claim GET and LIST against the fake apiserver over real HTTP: paging, chunking, failures, proxy."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from driver.errors import KubeError
from driver.kube.client import KubeClient, error_kind
from harness.fake_tls_api import write_kubeconfig
from harness.fakeapiserver import FakeApiServer, Fault
from tests.support.connectproxy import ConnectProxy

CLAIMS = "/apis/resource.k8s.io/v1/namespaces"


def _claim(namespace: str, name: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": {}}


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[KubeClient]:
    kube = KubeClient(api.kubeconfig_path, timeout=2.0, connect_timeout=0.5)
    yield kube
    kube.close()


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [i["metadata"]["name"] for i in items]


def test_list_pages_through_one_namespace_in_name_order(api: FakeApiServer, client: KubeClient) -> None:
    """limit/continue pages cover the namespace's claims once each, sorted by name, other namespaces not."""
    for name in ("d", "a", "g", "c", "f", "b", "e"):
        api.put_object(_claim("team-a", name))
    api.put_object(_claim("team-b", "a0"))
    pages, token = [], ""
    while True:
        items, token = client.list_resource_claims("team-a", limit=3, continue_token=token)
        pages.append(_names(items))
        if not token:
            break
    assert pages == [["a", "b", "c"], ["d", "e", "f"], ["g"]]
    items, token = client.list_resource_claims("team-a")
    assert (_names(items), token) == (list("abcdefg"), "")
    queries = [r.query for r in api.requests if r.path.endswith("/team-a/resourceclaims")]
    assert queries[0] == "limit=3" and queries[1].startswith("limit=3&continue=") and queries[-1] == ""


def test_list_of_an_empty_namespace_is_empty(client: KubeClient) -> None:
    """A namespace without claims lists as no items and no token (not 404)."""
    assert client.list_resource_claims("nobody") == ([], "")


def test_fake_answers_a_big_list_chunked(api: FakeApiServer, client: KubeClient) -> None:
    """Like Go's server, the fake sends a LIST over 2 KiB chunked; the client reads it whole."""
    for i in range(60):
        api.put_object(_claim("big", f"claim-{i:02d}"))
    conn = http.client.HTTPConnection(api.host, api.port)
    conn.request("GET", f"{CLAIMS}/big/resourceclaims")
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    assert response.getheader("Transfer-Encoding") == "chunked" and len(raw) > 2048
    items, _ = client.list_resource_claims("big")
    assert _names(items) == [f"claim-{i:02d}" for i in range(60)]


@pytest.mark.parametrize(
    ("token", "status", "message"),
    [
        pytest.param("garbage", 400, "continue key is not valid", id="malformed"),
        pytest.param("", 410, "too old to display a consistent list", id="compacted"),
    ],
)
def test_bad_continue_tokens(
    api: FakeApiServer, client: KubeClient, token: str, status: int, message: str
) -> None:
    """A malformed token is 400; one from before a compaction is 410 Gone (the caller lists anew)."""
    for name in "abc":
        api.put_object(_claim("ns", name))
    if not token:
        _, token = client.list_resource_claims("ns", limit=1)
        api.put_object(_claim("ns", "d"))  # history moves on, and is compacted past the token
        api.compact()
    with pytest.raises(KubeError) as info:
        client.list_resource_claims("ns", limit=1, continue_token=token)
    err = info.value
    assert (err.verb, err.resource, err.name, err.status) == ("list", "resourceclaims", "ns", status)
    assert str(err).startswith(f"list resourceclaims/ns: HTTP {status}: ") and message in str(err)


def test_fake_refuses_a_claim_watch(api: FakeApiServer) -> None:
    """The fake streams slice watches only; a claim watch is 405 rather than slice events."""
    conn = http.client.HTTPConnection(api.host, api.port)
    conn.request("GET", f"{CLAIMS}/ns/resourceclaims?watch=true")
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()
    assert response.status == 405 and "only served on slices" in body["message"]


@pytest.mark.parametrize(
    ("fault", "name", "status", "transient", "message"),
    [
        pytest.param(None, "missing", 404, False, 'resourceclaims "missing" not found', id="404"),
        pytest.param(Fault(403), "c1", 403, False, "injected fault", id="403"),
        pytest.param(Fault(500), "c1", 500, True, "injected fault", id="500"),
        pytest.param(Fault(429), "c1", 429, True, "injected fault", id="429"),
    ],
)
def test_error_answers_map_to_kube_errors(
    api: FakeApiServer,
    client: KubeClient,
    fault: Fault | None,
    name: str,
    status: int,
    transient: bool,
    message: str,
) -> None:
    """An error answer gives a KubeError naming the claim, with status, transience and the
    apiserver's own message."""
    api.put_object(_claim("ns", "c1"))
    if fault is not None:
        api.inject_fault(fault)
    with pytest.raises(KubeError) as info:
        client.get_resource_claim("ns", name)
    err = info.value
    assert (str(err), err.status, err.transient, err.name) == (
        f"get resourceclaims/ns/{name}: HTTP {status}: {message}",
        status,
        transient,
        f"ns/{name}",
    )


def test_dropped_request_on_a_kept_connection_is_resent_once(api: FakeApiServer, client: KubeClient) -> None:
    """One connection drop on a kept connection is absorbed; two in a row are an unreachable error."""
    api.put_object(_claim("ns", "c1"))
    client.get_resource_claim("ns", "c1")
    api.inject_fault(Fault(0, path_contains="/resourceclaims/"))
    assert client.get_resource_claim("ns", "c1")["metadata"]["name"] == "c1"
    api.inject_fault(Fault(0, path_contains="/resourceclaims/", times=2))
    with pytest.raises(KubeError) as info:
        client.get_resource_claim("ns", "c1")
    assert info.value.status is None and info.value.transient and error_kind(info.value) == "unreachable"
    assert str(info.value) == (
        "get resourceclaims/ns/c1: apiserver unreachable: "
        "ConnectionClosedError: the server closed the connection without answering"
    )


def test_stopped_apiserver_then_back(api: FakeApiServer, client: KubeClient) -> None:
    """Stopped: "refused" at once; started again: the dead kept connection is dropped and GETs work."""
    api.put_object(_claim("ns", "c1"))
    client.get_resource_claim("ns", "c1")
    api.stop()
    with pytest.raises(KubeError) as info:
        client.get_resource_claim("ns", "c1")
    assert info.value.status is None and "refused" in str(info.value).lower()
    api.start()
    assert client.get_resource_claim("ns", "c1")["metadata"]["name"] == "c1"


def test_reads_go_through_a_proxy(api: FakeApiServer, tmp_path: Path) -> None:
    """With a proxy-url, claim GETs and LISTs tunnel through it (the made-up server name resolves
    only there), over the one transport every call uses."""
    api.put_object(_claim("ns", "c1"))
    proxy = ConnectProxy(routes={"apiserver.test": ("127.0.0.1", api.port)})
    path = write_kubeconfig(
        tmp_path / "kubeconfig",
        f"http://apiserver.test:{api.port}",
        cluster={"proxy-url": proxy.url},
        user={"token": "t"},
    )
    client = KubeClient(path, timeout=2.0, connect_timeout=0.5)
    try:
        assert client.get_resource_claim("ns", "c1")["metadata"]["name"] == "c1"
        assert _names(client.list_resource_claims("ns")[0]) == ["c1"]
    finally:
        client.close()
        proxy.close()
    assert proxy.tunnels == [f"apiserver.test:{api.port}"]  # one kept-alive tunnel for both
