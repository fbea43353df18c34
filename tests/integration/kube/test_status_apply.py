"""The claim status apply: wire form, auth, errors, resend, deadline, proxy.

The apply rides the same kept-alive pool as the claim reads: one resend on a connection the
server closed (a forced apply of one body is idempotent), an overall deadline, the token of the
moment, and the same KubeError for the same answer as every other call.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from driver.errors import KubeError
from driver.kube.client import RESOURCE_API, KubeClient, error_kind
from harness.fake_tls_api import FakeTlsApiServer, Pki, write_kubeconfig
from harness.fakeapiserver import FakeApiServer, Fault
from tests.support.connectproxy import ConnectProxy

from .hostile_api import HostileApiServer

DRIVER = "numadra.dev"
ENTRY = {"driver": DRIVER, "pool": "node-a", "device": "nic-0"}
STATUS_PATH = f"{RESOURCE_API}/namespaces/ns1/resourceclaims/c1/status"


def _claim(namespace: str = "ns1", name: str = "c1") -> dict[str, Any]:
    result = {"request": "nic", **ENTRY}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[KubeClient]:
    kube = KubeClient(api.kubeconfig_path, timeout=2.0, connect_timeout=0.5)
    yield kube
    kube.close()


def test_apply_is_a_forced_server_side_apply_on_the_kept_connection(
    pki: Pki, tls_api: FakeTlsApiServer, tmp_path: Path
) -> None:
    """PATCH on /status, apply-patch content type, our field manager and force, the JSON body of
    our entries; over the connection the claim GET opened (TLS, bearer token)."""
    cluster = {"certificate-authority": str(pki.ca)}
    path = write_kubeconfig(tmp_path / "kubeconfig", tls_api.url, cluster=cluster, user={"token": "t"})
    tls_api.token = "t"
    client = KubeClient(path, timeout=2.0, connect_timeout=1.0)
    try:
        client.get_resource_claim("ns1", "c1")
        client.apply_claim_status("ns1", "c1", [ENTRY], DRIVER)
        client.apply_claim_status("ns1", "c1", [], DRIVER)
        assert tls_api.connections == 1
    finally:
        client.close()
    get, apply, clear = tls_api.seen
    assert (get.method, apply.method, clear.method) == ("GET", "PATCH", "PATCH")
    assert apply.path == f"{STATUS_PATH}?fieldManager={DRIVER}&force=true"
    assert apply.content_type == "application/apply-patch+yaml"
    assert apply.authorization == "Bearer t"
    assert json.loads(apply.body) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "ns1"},
        "status": {"devices": [ENTRY]},
    }
    assert json.loads(clear.body)["status"] == {"devices": []}


def test_apply_takes_the_token_of_the_moment(pki: Pki, tls_api: FakeTlsApiServer, tmp_path: Path) -> None:
    """An expiring exec credential is fetched again before each apply, as before each GET."""
    counter = tmp_path / "count"
    script = tmp_path / "credential.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'n=$(( $(cat "{counter}" 2>/dev/null || echo 0) + 1 )); echo $n > "{counter}"\n'
        'printf \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
        '"status":{"token":"tok-%s","expirationTimestamp":"2000-01-01T00:00:00Z"}}\' $n\n'
    )
    script.chmod(0o755)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}}
    cluster = {"certificate-authority": str(pki.ca)}
    client = KubeClient(write_kubeconfig(tmp_path / "kubeconfig", tls_api.url, cluster=cluster, user=user))
    try:
        client.configure()  # tok-1
        for _ in range(3):
            client.apply_claim_status("ns1", "c1", [ENTRY], DRIVER)
        assert tls_api.connections == 1
    finally:
        client.close()
    assert [s.authorization for s in tls_api.seen] == ["Bearer tok-2", "Bearer tok-3", "Bearer tok-4"]


def test_apply_dropped_on_a_kept_connection_is_resent_once(
    pki: Pki, tls_api: FakeTlsApiServer, tmp_path: Path
) -> None:
    """A server closing a kept connection as the apply arrives costs one resend of the same body."""
    tls_api.drop_after = 1  # every connection answers once, then drops the next request
    cluster = {"certificate-authority": str(pki.ca)}
    client = KubeClient(write_kubeconfig(tmp_path / "k", tls_api.url, cluster=cluster, user={"token": "t"}))
    try:
        client.get_resource_claim("ns1", "c1")
        client.apply_claim_status("ns1", "c1", [ENTRY], DRIVER)
    finally:
        client.close()
    _, dropped, resent = tls_api.seen
    assert (dropped.method, resent.method) == ("PATCH", "PATCH")
    assert dropped.body == resent.body and json.loads(resent.body)["status"] == {"devices": [ENTRY]}


def test_apply_writes_the_claim_status(api: FakeApiServer, client: KubeClient) -> None:
    """Against the fake's server-side apply: our entry lands, and an empty apply takes it away."""
    api.put_object(_claim())
    client.apply_claim_status("ns1", "c1", [ENTRY], DRIVER)
    stored = api.get_object("ResourceClaim", "c1", "ns1")
    assert stored is not None and stored["status"]["devices"] == [ENTRY]
    client.apply_claim_status("ns1", "c1", [], DRIVER)
    stored = api.get_object("ResourceClaim", "c1", "ns1")
    assert stored is not None and not stored["status"].get("devices")
    assert api.connections == 1


@pytest.mark.parametrize(
    ("status", "transient"), [(404, False), (403, False), (409, True), (422, False), (429, True), (500, True)]
)
def test_apply_errors_map_to_kube_errors(
    api: FakeApiServer, client: KubeClient, status: int, transient: bool
) -> None:
    """An error answer is a KubeError naming the call (verb, resource, ns/name), with the status,
    whether it may pass, and the apiserver's message."""
    api.put_object(_claim())
    api.inject_fault(Fault(status, method="PATCH"))
    with pytest.raises(KubeError) as info:
        client.apply_claim_status("ns1", "c1", [ENTRY], DRIVER)
    err = info.value
    assert str(err) == f"apply resourceclaims/status/ns1/c1: HTTP {status}: injected fault"
    assert (err.verb, err.resource, err.name, err.status, err.transient) == (
        "apply",
        "resourceclaims/status",
        "ns1/c1",
        status,
        transient,
    )


def test_apply_that_gets_no_answer_twice_is_unreachable(api: FakeApiServer, client: KubeClient) -> None:
    """Two drops in a row (the kept connection, then the fresh one): a transient error, no loop."""
    api.put_object(_claim())
    client.get_resource_claim("ns1", "c1")
    api.inject_fault(Fault(0, method="PATCH", times=2))
    with pytest.raises(KubeError) as info:
        client.apply_claim_status("ns1", "c1", [ENTRY], DRIVER)
    assert str(info.value) == (
        "apply resourceclaims/status/ns1/c1: apiserver unreachable: "
        "ConnectionClosedError: the server closed the connection without answering"
    )
    assert info.value.transient and error_kind(info.value) == "unreachable"
    assert [r.method for r in api.requests].count("PATCH") == 2


def test_apply_through_a_proxy(api: FakeApiServer, tmp_path: Path) -> None:
    """A kubeconfig proxy-url carries the apply too (the only way the made-up name resolves)."""
    api.put_object(_claim())
    proxy = ConnectProxy(routes={"apiserver.test": ("127.0.0.1", api.port)})
    path = write_kubeconfig(
        tmp_path / "kubeconfig",
        f"http://apiserver.test:{api.port}",
        cluster={"proxy-url": proxy.url},
        user={"token": "t"},
    )
    client = KubeClient(path, timeout=2.0, connect_timeout=0.5)
    try:
        client.apply_claim_status("ns1", "c1", [ENTRY], DRIVER)
    finally:
        client.close()
        proxy.close()
    stored = api.get_object("ResourceClaim", "c1", "ns1")
    assert stored is not None and stored["status"]["devices"] == [ENTRY]
    assert proxy.tunnels == [f"apiserver.test:{api.port}"]


@pytest.mark.fault
def test_apply_ends_by_its_deadline_on_a_trickling_server(tmp_path: Path) -> None:
    """One byte every 0.1 s never trips the 1 s per-read timeout; the apply still ends, by its
    deadline of connect + read timeout (1.5 s), instead of lasting as long as the server likes and
    holding every queued status write behind it."""
    hostile = HostileApiServer("trickle-body", 0.1)
    path = write_kubeconfig(tmp_path / "kubeconfig", hostile.url, cluster={}, user={"token": "t"})
    client = KubeClient(path, timeout=1.0, connect_timeout=0.5)
    errors: list[KubeError] = []

    def apply() -> None:
        try:
            client.apply_claim_status("ns1", "c1", [ENTRY], DRIVER)
        except KubeError as exc:
            errors.append(exc)

    worker = threading.Thread(target=apply, daemon=True)
    try:
        worker.start()
        worker.join(10)
        assert not worker.is_alive(), "the apply did not end by its deadline"
    finally:
        client.close()
        hostile.close()
    (err,) = errors
    assert "deadline of 1.5 s" in str(err) and error_kind(err) == "timeout"
    assert (err.verb, err.resource, err.name) == ("apply", "resourceclaims/status", "ns1/c1")
    assert err.status is None and err.transient
