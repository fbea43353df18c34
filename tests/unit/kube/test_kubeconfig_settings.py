"""The transport's settings: what a kubeconfig's Configuration gives them, the Host header."""

from __future__ import annotations

import socket

import pytest
from kubernetes.client import Configuration

from driver.errors import ConfigError
from driver.kube.kubeconfig import configuration_key, settings_from_configuration
from driver.kube.proxy import Proxy
from driver.kube.transport import TransportSettings


@pytest.mark.parametrize(
    ("scheme", "host", "port", "header"),
    [
        pytest.param("https", "api.example", 443, "api.example", id="https-default-port"),
        pytest.param("http", "api.example", 80, "api.example", id="http-default-port"),
        pytest.param("https", "::1", 6443, "[::1]:6443", id="ipv6"),
    ],
)
def test_host_header(scheme: str, host: str, port: int, header: str) -> None:
    """Host names the port only when it is not the default, and brackets IPv6 addresses."""
    assert TransportSettings(scheme, host, port).host_header == header


# -- settings from the official Configuration -----------------------------------------------------
def _cfg(host: str = "https://10.0.0.1:6443", **fields: object) -> Configuration:
    cfg = Configuration(host=host)
    cfg.proxy = None  # no proxy from this test process' environment
    for name, value in fields.items():
        setattr(cfg, name, value)
    return cfg


def test_settings_take_tls_and_host_from_configuration() -> None:
    """Host, port, base path, CA, client certificate, SNI and verification come across as they are."""
    cfg = _cfg(
        "https://10.0.0.1:6443/prefix/",
        ssl_ca_cert="/ca.crt",
        cert_file="/c.crt",
        key_file="/c.key",
        tls_server_name="kubernetes",
    )
    settings = settings_from_configuration(cfg)
    assert settings == TransportSettings(
        scheme="https",
        host="10.0.0.1",
        port=6443,
        base_path="/prefix",
        server_hostname="kubernetes",
        ca_file="/ca.crt",
        cert_file="/c.crt",
        key_file="/c.key",
    )


def test_settings_default_ports_and_switches() -> None:
    """A URL without a port gets the scheme's; insecure-skip-verify and assert_hostname=False carry over."""
    assert settings_from_configuration(_cfg("http://api.example")).port == 80
    settings = settings_from_configuration(
        _cfg("https://api.example", verify_ssl=False, assert_hostname=False)
    )
    assert (settings.port, settings.verify, settings.check_hostname) == (443, False, False)


def test_settings_carry_socket_options() -> None:
    """Explicit socket options, or the client's TCP keepalive ones, are applied to our sockets too."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    assert settings_from_configuration(_cfg(socket_options=options)).socket_options == tuple(options)
    keepalive = settings_from_configuration(_cfg(keep_alive=True)).socket_options
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in keepalive


@pytest.mark.parametrize(
    ("cfg", "reason"),
    [
        pytest.param(_cfg(proxy="https://proxy:3128"), "proxy scheme 'https'", id="https-proxy"),
        pytest.param(_cfg(proxy="socks5://proxy:1080"), "proxy scheme 'socks5'", id="socks-proxy"),
        pytest.param(_cfg(assert_hostname="other.example"), "assert_hostname", id="assert-hostname"),
        pytest.param(_cfg(client_go_retries=True), "retries", id="client-go-retries"),
        pytest.param(_cfg("unix:///run/api.sock"), "scheme", id="unix"),
        pytest.param(_cfg("https://user:pw@10.0.0.1"), "server URL", id="credentials-in-url"),
    ],
)
def test_settings_refuse_what_they_cannot_honour(cfg: Configuration, reason: str) -> None:
    """A setting the transport cannot apply fails the configuration, naming it; never dropped."""
    with pytest.raises(ConfigError, match=reason):
        settings_from_configuration(cfg)


def test_a_proxy_url_becomes_a_tunnel_with_its_credentials() -> None:
    """proxy-url http://user:pw@proxy:3128: the transport tunnels through it, authenticated."""
    settings = settings_from_configuration(_cfg(proxy="http://user:pw@proxy.example:3128"))
    assert settings.proxy == Proxy("proxy.example", 3128, "Basic dXNlcjpwdw==")
    assert settings.host == "10.0.0.1"  # still the server the requests name


def test_proxy_bypassed_by_no_proxy_is_not_used() -> None:
    """A proxy that no_proxy excludes for this host is not in the way."""
    cfg = _cfg(proxy="http://proxy:3128", no_proxy="10.0.0.0/8")
    assert settings_from_configuration(cfg).proxy is None


def test_configuration_key_sees_a_new_client_certificate() -> None:
    """Swapping the client certificate (an exec plugin refresh) changes the key; a token does not."""
    cfg = _cfg(cert_file="/a.crt")
    before = configuration_key(cfg)
    cfg.api_key["BearerToken"] = "Bearer new"
    assert configuration_key(cfg) == before
    cfg.cert_file = "/b.crt"
    assert configuration_key(cfg) != before
