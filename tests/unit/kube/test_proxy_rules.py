"""Which proxy carries the apiserver connection: proxy URLs and NO_PROXY, read as Go reads them."""

from __future__ import annotations

import pytest

from driver.errors import ConfigError
from driver.kube.proxy import Proxy, bypasses_proxy, environment_proxy, parse_proxy_url


@pytest.mark.parametrize(
    ("url", "proxy"),
    [
        pytest.param("http://proxy.example:3128", Proxy("proxy.example", 3128), id="plain"),
        pytest.param("proxy.example:3128", Proxy("proxy.example", 3128), id="no-scheme-means-http"),
        pytest.param("http://proxy.example", Proxy("proxy.example", 80), id="default-port"),
        pytest.param("http://[fd00::1]:8080", Proxy("fd00::1", 8080), id="ipv6"),
        pytest.param(
            "http://us%40er:p%3Aw@proxy:3128",
            Proxy("proxy", 3128, "Basic dXNAZXI6cDp3"),
            id="escaped-credentials",
        ),
    ],
)
def test_proxy_urls(url: str, proxy: Proxy) -> None:
    assert parse_proxy_url(url, "test") == proxy


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("https://proxy:3128", "proxy scheme 'https' is not supported", id="https"),
        pytest.param("socks5://proxy:1080", "proxy scheme 'socks5' is not supported", id="socks5"),
        pytest.param("http://proxy:99999", "is not a URL", id="bad-port"),
        pytest.param("http://:3128", "names no host", id="no-host"),
    ],
)
def test_a_proxy_url_the_transport_cannot_use_is_refused_naming_its_source(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^environment variable HTTPS_PROXY: .*{message}"):
        parse_proxy_url(url, "environment variable HTTPS_PROXY")


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "bypassed"),
    [
        pytest.param("api.example", 443, "*", True, id="star"),
        pytest.param("api.notexample", 443, "example", False, id="suffix-inside-a-label"),
        pytest.param("api.example", 443, "api.example", True, id="exact-name"),
        pytest.param("a.api.example", 443, "api.example", True, id="name-covers-subdomains"),
        pytest.param("api.example", 443, ".api.example", False, id="dot-is-subdomains-only"),
        pytest.param("a.api.example", 443, ".api.example", True, id="dot-subdomain"),
        pytest.param("a.api.example", 443, "*.api.example", True, id="star-dot"),
        pytest.param("API.Example.", 443, "api.example", True, id="case-and-trailing-dot"),
        pytest.param("10.96.0.1", 443, "10.96.0.0/12", True, id="cidr"),
        pytest.param("10.112.0.1", 443, "10.96.0.0/12", False, id="outside-cidr"),
        pytest.param("10.96.0.1", 443, "10.96.0.1", True, id="ip"),
        pytest.param("fd00::1", 443, "[fd00::1]:443", True, id="ipv6-with-port"),
        pytest.param("fd00::1", 443, "fd00::/8", True, id="ipv6-cidr"),
        pytest.param("api.example", 443, "api.example:6443", False, id="other-port"),
        pytest.param("api.example", 6443, " x.test , api.example:6443 ", True, id="list-with-spaces"),
        pytest.param("api.example", 443, "", False, id="empty"),
    ],
)
def test_no_proxy_rules(host: str, port: int, no_proxy: str, bypassed: bool) -> None:
    assert bypasses_proxy(host, port, no_proxy) is bypassed


ENV = {
    "HTTPS_PROXY": "http://upper:3128",
    "https_proxy": "http://lower:3128",
    "HTTP_PROXY": "http://plain:80",
}


@pytest.mark.parametrize(
    ("scheme", "host", "environ", "proxy_host"),
    [
        pytest.param("https", "10.96.0.1", ENV, "upper", id="upper-case-wins"),
        pytest.param("https", "10.96.0.1", {"https_proxy": "http://lower:3128"}, "lower", id="lower-case"),
        pytest.param("http", "10.96.0.1", ENV, "plain", id="http-server-http-proxy"),
        pytest.param(
            "https", "10.96.0.1", {"HTTP_PROXY": "http://plain:80"}, None, id="https-ignores-http-proxy"
        ),
        pytest.param("https", "10.96.0.1", {"ALL_PROXY": "http://all:1"}, None, id="all-proxy-ignored-as-go"),
        pytest.param("https", "127.0.0.1", ENV, None, id="loopback-direct"),
        pytest.param("https", "localhost", ENV, None, id="localhost-direct"),
        pytest.param("https", "10.96.0.1", {**ENV, "NO_PROXY": "10.0.0.0/8"}, None, id="no-proxy"),
        pytest.param("https", "10.96.0.1", {**ENV, "no_proxy": "10.0.0.0/8"}, None, id="lower-no-proxy"),
        pytest.param("https", "10.96.0.1", {"HTTPS_PROXY": " "}, None, id="blank"),
    ],
)
def test_environment_proxy(scheme: str, host: str, environ: dict[str, str], proxy_host: str | None) -> None:
    proxy = environment_proxy(scheme, host, 443, environ)
    assert (proxy.host if proxy else None) == proxy_host
