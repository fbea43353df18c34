"""The apiserver behind an HTTP proxy: every call tunnels through it with CONNECT, as client-go's.

The proxy is a real one on loopback (tests/support/connectproxy.py) that routes the made-up name
``kubernetes.default.svc`` to the fake apiserver: that name resolves nowhere else, so a call that
succeeds went through the proxy. The settings come from the kubeconfig's ``proxy-url`` or, in a
pod, from ``HTTPS_PROXY``/``NO_PROXY``; neither path falls back to another client.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.errors import ConfigError, KubeError
from driver.kube.client import KubeClient, slice_field_selector
from driver.kube.incluster import InCluster
from harness.fake_tls_api import FakeTlsApiServer, Pki, write_kubeconfig
from harness.fakeapiserver import FakeApiServer
from tests.support.connectproxy import ConnectProxy

NAME = "kubernetes.default.svc"
BASIC = "Basic dXNlcjpwdw=="  # user:pw


@pytest.fixture
def proxied(tls_api: FakeTlsApiServer) -> Iterator[ConnectProxy]:
    """A proxy that sends ``kubernetes.default.svc`` to the TLS fake."""
    proxy = ConnectProxy(routes={NAME: ("127.0.0.1", _port(tls_api.url))})
    yield proxy
    proxy.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _kubeconfig(tmp_path: Path, pki: Pki, server: str, proxy_url: str) -> str:
    cluster = {"certificate-authority": str(pki.ca), "proxy-url": proxy_url}
    return write_kubeconfig(tmp_path / "kubeconfig", server, cluster=cluster, user={"token": "t0ken"})


def _pod(tmp_path: Path, pki: Pki, host: str, port: int, **env: str) -> InCluster:
    (tmp_path / "token").write_text("t0ken")
    environ = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port), **env}
    return InCluster(environ, token_file=str(tmp_path / "token"), ca_file=str(pki.ca))


def test_a_kubeconfig_proxy_url_carries_every_call(
    tls_api: FakeTlsApiServer, proxied: ConnectProxy, pki: Pki, tmp_path: Path
) -> None:
    """GETs and a status apply reach the server through one tunnel, TLS checked against its name."""
    port = _port(tls_api.url)
    client = KubeClient(_kubeconfig(tmp_path, pki, f"https://{NAME}:{port}", proxied.url))
    try:
        assert client.get_resource_claim("ns1", "c1")["metadata"]["name"] == "c1"
        client.apply_claim_status("ns1", "c1", [], "numadra.dev")
    finally:
        client.close()
    assert proxied.tunnels == [f"{NAME}:{port}"]
    assert [s.authorization for s in tls_api.seen] == ["Bearer t0ken"] * 2


@pytest.mark.parametrize(
    ("userinfo", "works"),
    [pytest.param("user:pw@", True, id="right"), pytest.param("user:no@", False, id="wrong")],
)
def test_proxy_credentials_go_in_the_connect_request(
    tls_api: FakeTlsApiServer, pki: Pki, tmp_path: Path, userinfo: str, works: bool
) -> None:
    """user:password in the proxy URL is sent as Proxy-Authorization: Basic; a 407 is an error
    that says the tunnel failed, never a request sent around the proxy."""
    port = _port(tls_api.url)
    proxy = ConnectProxy(routes={NAME: ("127.0.0.1", port)}, authorization=BASIC)
    url = proxy.url.replace("http://", f"http://{userinfo}")
    client = KubeClient(_kubeconfig(tmp_path, pki, f"https://{NAME}:{port}", url))
    try:
        if works:
            assert client.get_resource_claim("ns1", "c1")["metadata"]["name"] == "c1"
        else:
            with pytest.raises(KubeError, match="Tunnel connection failed: 407"):
                client.get_resource_claim("ns1", "c1")
    finally:
        client.close()
        proxy.close()
    assert proxy.authorizations[:1] == ([BASIC] if works else ["Basic dXNlcjpubw=="])


def test_in_a_pod_https_proxy_is_honoured(
    tls_api: FakeTlsApiServer, proxied: ConnectProxy, pki: Pki, tmp_path: Path
) -> None:
    port = _port(tls_api.url)
    client = KubeClient(in_cluster=_pod(tmp_path, pki, NAME, port, HTTPS_PROXY=proxied.url))
    try:
        assert client.get_resource_claim("ns1", "c1")["metadata"]["uid"] == "uid-ns1-c1"
    finally:
        client.close()
    assert proxied.tunnels == [f"{NAME}:{port}"]


@pytest.mark.parametrize(
    ("host", "no_proxy", "reached"),
    [
        pytest.param("127.0.0.1", "", True, id="loopback-never-proxied"),
        pytest.param(NAME, ".svc", False, id="no-proxy-suffix"),
        pytest.param(NAME, "kubernetes.default.svc:1", True, id="no-proxy-other-port"),
    ],
)
def test_in_a_pod_no_proxy_is_honoured(
    tls_api: FakeTlsApiServer,
    proxied: ConnectProxy,
    pki: Pki,
    tmp_path: Path,
    host: str,
    no_proxy: str,
    reached: bool,
) -> None:
    """NO_PROXY and loopback go direct (the made-up name then resolves nowhere: an error without
    the proxy hearing of it); an entry for another port does not match."""
    port = _port(tls_api.url)
    env = {"HTTPS_PROXY": proxied.url, "NO_PROXY": no_proxy}
    client = KubeClient(in_cluster=_pod(tmp_path, pki, host, port, **env), connect_timeout=2.0)
    try:
        if reached:
            client.get_resource_claim("ns1", "c1")
        else:
            with pytest.raises(KubeError, match="unreachable"):
                client.get_resource_claim("ns1", "c1")
    finally:
        client.close()
    assert bool(proxied.tunnels) == (host == NAME and reached)


def test_a_watch_tunnels_too(tmp_path: Path) -> None:
    """The slice watch (a connection of its own) goes through the proxy like every other call."""
    with FakeApiServer() as api:
        proxy = ConnectProxy(routes={NAME: ("127.0.0.1", api.port)})
        path = write_kubeconfig(
            tmp_path / "k", f"http://{NAME}:{api.port}", cluster={"proxy-url": proxy.url}, user={"token": "t"}
        )
        client = KubeClient(path)
        try:
            _, version = client.list_resource_slices()
            watch = client.watch_resource_slices(
                field_selector=slice_field_selector("n1", "numadra.dev"),
                resource_version=version,
                timeout_seconds=1,
            )
            events: list[str] = []
            reader = threading.Thread(target=lambda: events.extend(kind for kind, _ in watch))
            reader.start()
            reader.join(10)
            assert not reader.is_alive()
        finally:
            client.close()
            proxy.close()
    assert proxy.tunnels == [f"{NAME}:{api.port}"] * 2  # the LIST's and the watch's connections


@pytest.mark.parametrize(
    ("proxy_url", "message"),
    [
        pytest.param("https://127.0.0.1:3128", "proxy scheme 'https' is not supported", id="https-proxy"),
        pytest.param("socks5://127.0.0.1:1080", "proxy scheme 'socks5' is not supported", id="socks5"),
    ],
)
def test_a_proxy_the_transport_cannot_use_fails_the_configuration(
    pki: Pki, tmp_path: Path, proxy_url: str, message: str
) -> None:
    """Refused at start with a line naming the setting, not ignored (no call goes around it)."""
    client = KubeClient(_kubeconfig(tmp_path, pki, "https://10.0.0.1:6443", proxy_url))
    with pytest.raises(ConfigError, match=message):
        client.configure()


def test_an_unusable_proxy_in_a_pods_environment_is_named(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="environment variable HTTPS_PROXY: proxy scheme 'socks5'"):
        _pod(tmp_path, pki, NAME, 443, HTTPS_PROXY="socks5://proxy:1080")
