"""The lean transport's pure parts: reading HTTP/1.x answers, building requests, reading settings."""

from __future__ import annotations

import socket
from collections.abc import Iterable

import pytest
from kubernetes.client import Configuration

from driver.kube.transport import (
    ConnectionClosedError,
    ProtocolError,
    ResponseReader,
    Transport,
    TransportSettings,
    UnsupportedConfigError,
    configuration_key,
    settings_from_configuration,
)

BODY = b'{"kind":"ResourceClaim","metadata":{"name":"c1"}}'
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\n"
    + BODY[:5]
    + b"\r\n"
    + b"%x\r\n" % (len(BODY) - 5)
    + BODY[5:]
    + b"\r\n0\r\nTrailer: x\r\n\r\n"
)


def _reader(chunks: Iterable[bytes]) -> ResponseReader:
    """A reader fed from ``chunks``, then end of stream (b"")."""
    pending = list(chunks)
    return ResponseReader(lambda _size: pending.pop(0) if pending else b"")


def _bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


@pytest.mark.parametrize(
    "split", [pytest.param(False, id="one-piece"), pytest.param(True, id="byte-by-byte")]
)
@pytest.mark.parametrize("wire", [pytest.param(OK, id="content-length"), pytest.param(CHUNKED, id="chunked")])
def test_reads_the_body_however_it_arrives(wire: bytes, split: bool) -> None:
    """Content-Length and chunked bodies decode the same, in one recv or one byte per recv."""
    response = _reader(_bytewise(wire) if split else [wire]).read_response()
    assert (response.status, response.body, response.keep_alive) == (200, BODY, True)


def test_two_answers_in_one_read_stay_apart() -> None:
    """Bytes of a second answer are not swallowed by the first (and make the first not reusable)."""
    reader = _reader([OK + OK])
    first = reader.read_response()
    assert first.body == BODY and not first.keep_alive  # stray bytes: the connection is not reused
    assert reader.read_response().body == BODY


def test_interim_answers_are_skipped() -> None:
    """A 100 Continue before the real answer is read past."""
    assert _reader([b"HTTP/1.1 100 Continue\r\n\r\n" + OK]).read_response().body == BODY


def test_error_status_keeps_its_body() -> None:
    """A 404 comes back with its Status body (the message KubeError quotes)."""
    body = b'{"kind":"Status","code":404,"message":"not found"}'
    wire = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    response = _reader([wire]).read_response()
    assert (response.status, response.body) == (404, body)


@pytest.mark.parametrize(
    ("head", "keep_alive"),
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", True, id="http11-default"),
        pytest.param(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n", False, id="close"),
        pytest.param(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n", False, id="http10-default"),
        pytest.param(
            b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n", True, id="http10-ka"
        ),
    ],
)
def test_keep_alive_follows_version_and_connection_header(head: bytes, keep_alive: bool) -> None:
    """HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 only when told to keep it."""
    assert _reader([head + b"\r\n{}"]).read_response().keep_alive is keep_alive


def test_body_without_length_reads_to_the_end() -> None:
    """No Content-Length and no chunking: the body ends with the connection, which is not reused."""
    response = _reader([b"HTTP/1.1 200 OK\r\n\r\n", BODY[:10], BODY[10:]]).read_response()
    assert (response.body, response.keep_alive) == (BODY, False)


def test_no_content_has_no_body() -> None:
    """204 has no body even without Content-Length, and the connection stays usable."""
    response = _reader([b"HTTP/1.1 204 No Content\r\n\r\n"]).read_response()
    assert (response.status, response.body, response.keep_alive) == (204, b"", True)


def test_header_names_are_lower_case_and_repeats_join() -> None:
    """Headers are looked up in lower case; a repeated header keeps both values."""
    wire = b"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 0\r\n\r\n"
    assert _reader([wire]).read_response().headers["x-a"] == "1, 2"


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        pytest.param(b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line", id="not-http"),
        pytest.param(b"HTTP/1.1 2x0 OK\r\n\r\n", "not an HTTP/1.x status line", id="bad-status"),
        pytest.param(b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "malformed header line", id="bad-header"),
        pytest.param(b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", "malformed header line", id="folded"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            "conflicting content-length",
            id="two-lengths",
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad content-length", id="negative"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
            "content-encoding 'gzip' was not asked for",
            id="gzip",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            "transfer-encoding",
            id="gzip-chunked",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "bad chunk size line",
            id="chunk-size",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", "bad chunk size line", id="minus"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
            "not followed by CRLF",
            id="chunk-crlf",
        ),
        pytest.param(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols", id="101"),
    ],
)
def test_malformed_answers_raise_protocol_error(wire: bytes, message: str) -> None:
    """Anything but well-formed, uncompressed HTTP/1.x is refused with a message saying what."""
    with pytest.raises(ProtocolError, match=message):
        _reader([wire]).read_response()


def test_endless_head_is_refused() -> None:
    """A head that never ends is cut off at the limit instead of filling memory."""
    endless = iter(lambda: b"X-Junk: " + b"a" * 8000 + b"\r\n", None)
    reader = ResponseReader(lambda _size: next(endless))
    with pytest.raises(ProtocolError, match="within"):
        reader.read_response()


def test_hang_up_before_answering_counts_no_bytes() -> None:
    """EOF before any byte: ConnectionClosedError with nothing received (what makes a retry safe)."""
    reader = _reader([])
    with pytest.raises(ConnectionClosedError, match="without answering"):
        reader.read_response()
    assert reader.received == 0


def test_hang_up_mid_body_counts_the_bytes() -> None:
    """EOF inside the body: ConnectionClosedError, and the reader knows bytes had arrived."""
    reader = _reader([OK[:-5]])
    with pytest.raises(ConnectionClosedError, match="bytes into the answer"):
        reader.read_response()
    assert reader.received == len(OK) - 5


# -- requests ------------------------------------------------------------------------------------
def _transport(**settings: object) -> Transport:
    base = {"scheme": "http", "host": "127.0.0.1", "port": 8080}
    base.update(settings)
    return Transport(TransportSettings(**base), connect_timeout=1, timeout=1)  # type: ignore[arg-type]


def test_request_is_one_get_with_host_and_headers() -> None:
    """The request is a bare HTTP/1.1 GET: target (with the base path), Host, the given headers."""
    request = _transport(base_path="/k8s")._request("/api/v1/nodes/n1?x=1", {"Authorization": "Bearer t"})
    assert request == (
        b"GET /k8s/api/v1/nodes/n1?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer t\r\n\r\n"
    )


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        pytest.param("/a b", {}, id="space-in-target"),
        pytest.param("/a\r\nX: y", {}, id="crlf-in-target"),
        pytest.param("relative", {}, id="relative-target"),
        pytest.param("/a", {"Authorization": "Bearer t\r\nX-Evil: 1"}, id="crlf-in-value"),
        pytest.param("/a", {"Authorization": "Bearer t\n"}, id="newline-in-token"),
        pytest.param("/a", {"Bad Name": "v"}, id="space-in-name"),
    ],
)
def test_request_refuses_injection(target: str, headers: dict[str, str]) -> None:
    """Control characters in the target or a header (a token file's newline) raise, never split."""
    with pytest.raises(ValueError, match="invalid"):
        _transport()._request(target, headers)


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
        pytest.param(_cfg(proxy="http://proxy:3128"), "proxy", id="proxy"),
        pytest.param(_cfg(assert_hostname="other.example"), "assert_hostname", id="assert-hostname"),
        pytest.param(_cfg(client_go_retries=True), "retries", id="client-go-retries"),
        pytest.param(_cfg("unix:///run/api.sock"), "scheme", id="unix"),
        pytest.param(_cfg("https://user:pw@10.0.0.1"), "server URL", id="credentials-in-url"),
    ],
)
def test_settings_refuse_what_they_cannot_honour(cfg: Configuration, reason: str) -> None:
    """A setting the transport cannot apply is reported, never dropped (the caller falls back)."""
    with pytest.raises(UnsupportedConfigError, match=reason):
        settings_from_configuration(cfg)


def test_proxy_bypassed_by_no_proxy_is_fine() -> None:
    """A proxy that no_proxy excludes for this host is not in the way."""
    cfg = _cfg(proxy="http://proxy:3128", no_proxy="10.0.0.0/8")
    assert settings_from_configuration(cfg).host == "10.0.0.1"


def test_configuration_key_sees_a_new_client_certificate() -> None:
    """Swapping the client certificate (an exec plugin refresh) changes the key; a token does not."""
    cfg = _cfg(cert_file="/a.crt")
    before = configuration_key(cfg)
    cfg.api_key["BearerToken"] = "Bearer new"
    assert configuration_key(cfg) == before
    cfg.cert_file = "/b.crt"
    assert configuration_key(cfg) != before
