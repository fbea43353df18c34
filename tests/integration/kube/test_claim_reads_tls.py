"""KubeClient claim reads against a TLS apiserver fake: auth, TLS, failures, connection reuse.

Connections are counted where they arrive: ``connections`` at the fake."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from driver.errors import ConfigError, KubeError
from driver.kube.client import KubeClient, error_kind
from harness.fake_tls_api import FakeTlsApiServer, Pki, write_kubeconfig

MakeClient = Callable[..., KubeClient]


@pytest.fixture
def make_client(tmp_path: Path, pki: Pki) -> Iterator[MakeClient]:
    """Clients for a fake, with the CA trusted and a token unless told otherwise; closed at the end."""
    made: list[KubeClient] = []

    def make(
        server: FakeTlsApiServer,
        *,
        cluster: dict[str, Any] | None = None,
        user: dict[str, Any] | None = None,
        timeout: float = 2.0,
    ) -> KubeClient:
        path = tmp_path / f"kubeconfig-{len(made)}"
        cluster = {"certificate-authority": str(pki.ca)} if cluster is None else cluster
        write_kubeconfig(path, server.url, cluster=cluster, user={"token": "t0ken"} if user is None else user)
        client = KubeClient(str(path), timeout=timeout, connect_timeout=1.0)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_bearer_token_reaches_the_server(tls_api: FakeTlsApiServer, make_client: MakeClient) -> None:
    """The kubeconfig token goes out as the Authorization header on every GET, over one connection."""
    tls_api.token = "s3cret"
    client = make_client(tls_api, user={"token": "s3cret"})
    names = [client.get_resource_claim("ns1", f"c{i}")["metadata"]["name"] for i in range(3)]
    assert names == ["c0", "c1", "c2"]
    assert {s.authorization for s in tls_api.seen} == {"Bearer s3cret"}
    assert tls_api.connections == 1


def test_wrong_token_is_401(tls_api: FakeTlsApiServer, make_client: MakeClient) -> None:
    """A refused token is an HTTP 401 KubeError, not retried and not transient."""
    tls_api.token = "s3cret"
    with pytest.raises(KubeError) as info:
        make_client(tls_api, user={"token": "stale"}).get_resource_claim("ns1", "c1")
    assert (info.value.status, info.value.transient, error_kind(info.value)) == (401, False, "unauthorized")
    assert len(tls_api.seen) == 1


def test_client_certificate_authenticates(
    mtls_api: FakeTlsApiServer, pki: Pki, make_client: MakeClient
) -> None:
    """A kubeconfig client certificate is presented in the handshake (the server reads its CN)."""
    user = {"client-certificate": str(pki.client_cert), "client-key": str(pki.client_key)}
    client = make_client(mtls_api, user=user)
    assert client.get_resource_claim("ns1", "c1")["metadata"]["uid"] == "uid-ns1-c1"
    assert [s.client_cn for s in mtls_api.seen] == ["numadra-test-client"]
    assert [s.authorization for s in mtls_api.seen] == [""]


def test_missing_client_certificate_fails(mtls_api: FakeTlsApiServer, make_client: MakeClient) -> None:
    """Without the certificate the server ends the handshake: a transient KubeError without status."""
    with pytest.raises(KubeError) as info:
        make_client(mtls_api).get_resource_claim("ns1", "c1")
    assert info.value.status is None and info.value.transient
    assert str(info.value).startswith("get resourceclaims/ns1/c1: apiserver unreachable: ")
    assert mtls_api.seen == []


def test_unknown_ca_fails_verification(tls_api: FakeTlsApiServer, pki: Pki, make_client: MakeClient) -> None:
    """A server certificate the configured CA did not sign is refused."""
    client = make_client(tls_api, cluster={"certificate-authority": str(pki.other_ca)})
    with pytest.raises(KubeError, match="CERTIFICATE_VERIFY_FAILED"):
        client.get_resource_claim("ns1", "c1")
    assert tls_api.seen == []


def test_insecure_skip_tls_verify_is_honoured(tls_api: FakeTlsApiServer, make_client: MakeClient) -> None:
    """insecure-skip-tls-verify accepts the server without any CA."""
    client = make_client(tls_api, cluster={"insecure-skip-tls-verify": True})
    assert client.get_resource_claim("ns1", "c1")["metadata"]["name"] == "c1"


@pytest.mark.parametrize(
    ("server_name", "ok"),
    [pytest.param("localhost", True, id="matching"), pytest.param("wrong.example", False, id="not-in-cert")],
)
def test_tls_server_name_is_the_name_checked(
    tls_api: FakeTlsApiServer, pki: Pki, make_client: MakeClient, server_name: str, ok: bool
) -> None:
    """tls-server-name replaces the URL's host as the name the certificate must carry."""
    client = make_client(
        tls_api, cluster={"certificate-authority": str(pki.ca), "tls-server-name": server_name}
    )
    if ok:
        assert client.get_resource_claim("ns1", "c1")["metadata"]["name"] == "c1"
    else:
        with pytest.raises(KubeError, match="CERTIFICATE_VERIFY_FAILED"):
            client.get_resource_claim("ns1", "c1")


def test_missing_ca_file_fails_configure(
    tls_api: FakeTlsApiServer, tmp_path: Path, make_client: MakeClient
) -> None:
    """An unreadable CA file is reported by configure(), at start, not on the first claim."""
    client = make_client(tls_api, cluster={"certificate-authority": str(tmp_path / "nope.crt")})
    with pytest.raises(ConfigError, match="cannot load the kubeconfig"):
        client.configure()


def test_exec_plugin_token_is_refreshed_per_request(
    tls_api: FakeTlsApiServer, tmp_path: Path, make_client: MakeClient
) -> None:
    """An exec credential that expires is fetched again before each GET: the refresh hook runs."""
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
    client = make_client(tls_api, user=user)
    client.configure()  # loading the kubeconfig runs the plugin once: tok-1
    for _ in range(3):
        client.get_resource_claim("ns1", "c1")
    assert [s.authorization for s in tls_api.seen] == ["Bearer tok-2", "Bearer tok-3", "Bearer tok-4"]
    assert tls_api.connections == 1


def test_request_dropped_on_a_kept_connection_is_retried(
    tls_api: FakeTlsApiServer, make_client: MakeClient
) -> None:
    """A server closing a kept connection as the next GET arrives costs a resend, not an error."""
    tls_api.drop_after = 1  # every connection answers once, then drops the next request
    client = make_client(tls_api)
    for i in range(4):
        assert client.get_resource_claim("ns1", f"c{i}")["metadata"]["name"] == f"c{i}"
    assert tls_api.connections == 4
    assert len(tls_api.seen) == 7  # 1 + 3 x (dropped + resent)


def test_connection_closed_while_idle_is_replaced(tls_api: FakeTlsApiServer, make_client: MakeClient) -> None:
    """A kept connection the server closed after its idle timeout is not used: no request is lost."""
    tls_api.idle_timeout = 0.2
    client = make_client(tls_api)
    client.get_resource_claim("ns1", "c1")
    deadline = time.monotonic() + 3
    while tls_api.closed == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    client.get_resource_claim("ns1", "c2")
    assert tls_api.connections == 2 and len(tls_api.seen) == 2


@pytest.mark.parametrize(
    ("name", "status", "transient", "message"),
    [
        pytest.param(
            "forbidden",
            403,
            False,
            'HTTP 403: resourceclaims.resource.k8s.io "forbidden" is forbidden: User cannot get',
            id="403",
        ),
        pytest.param(
            "missing", 404, False, 'HTTP 404: resourceclaims.resource.k8s.io "missing" not found', id="404"
        ),
        pytest.param("broken", 500, True, "HTTP 500: etcdserver: request timed out", id="500"),
    ],
)
def test_error_status_maps_to_kube_error(
    tls_api: FakeTlsApiServer, make_client: MakeClient, name: str, status: int, transient: bool, message: str
) -> None:
    """Error answers become the usual KubeError: verb, resource, ns/name, status, the Status message."""
    client = make_client(tls_api)
    with pytest.raises(KubeError) as info:
        client.get_resource_claim("ns1", name)
    err = info.value
    assert (err.verb, err.resource, err.name, err.status, err.transient) == (
        "get",
        "resourceclaims",
        f"ns1/{name}",
        status,
        transient,
    )
    assert str(err) == f"get resourceclaims/ns1/{name}: {message}"
    assert client.get_resource_claim("ns1", "after")["metadata"]["name"] == "after"  # connection still good
    assert tls_api.connections == 1


def test_slow_answer_times_out(tls_api: FakeTlsApiServer, make_client: MakeClient) -> None:
    """No answer within the client's read timeout: a transient KubeError labelled "timeout", once,
    while the server still holds the answer (for up to 30 s)."""
    client = make_client(tls_api, timeout=0.3)
    client.get_resource_claim("ns1", "warm")
    tls_api.slow_seconds = 30
    try:
        with pytest.raises(KubeError) as info:
            client.get_resource_claim("ns1", "slow")
        assert not tls_api.slow_answered.is_set(), "the client waited for the answer"
    finally:
        tls_api.release_slow.set()
    assert info.value.status is None and info.value.transient and error_kind(info.value) == "timeout"
    assert "read timeout of 0.3 s" in str(info.value)
    assert len(tls_api.seen) == 2


def test_chunked_list_is_read_whole(tls_api: FakeTlsApiServer, make_client: MakeClient) -> None:
    """A LIST answered chunked (uneven chunk sizes) decodes to every item in order."""
    client = make_client(tls_api)
    items, token = client.list_resource_claims("ns1")
    assert [i["metadata"]["name"] for i in items] == [f"claim-{i:04d}" for i in range(300)]
    assert token == ""
    assert tls_api.seen[-1].path == "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims"


def test_sixteen_threads_share_the_pool(tls_api: FakeTlsApiServer, make_client: MakeClient) -> None:
    """GETs from 16 threads each get their own claim back, on at most 16 connections."""
    client = make_client(tls_api)
    names = [f"c{i}" for i in range(160)]
    start = threading.Barrier(16)

    def get(name: str) -> str:
        if name in names[:16]:
            start.wait(5)  # make the first 16 truly concurrent
        return str(client.get_resource_claim("ns1", name)["metadata"]["name"])

    with ThreadPoolExecutor(16) as pool:
        assert list(pool.map(get, names)) == names
    assert 1 <= tls_api.connections <= 16
    assert len(tls_api.seen) == 160


def test_close_releases_and_the_client_stays_usable(
    tls_api: FakeTlsApiServer, make_client: MakeClient
) -> None:
    """close() drops the pooled connection; the next GET opens a new one."""
    client = make_client(tls_api)
    client.get_resource_claim("ns1", "c1")
    client.close()
    assert client.get_resource_claim("ns1", "c2")["metadata"]["name"] == "c2"
    assert tls_api.connections == 2
