"""What the transport makes of an apiserver's answers, played byte for byte by a loopback server.

The HTTP parsing is llhttp's (``httptools``); these tests hold the behaviour the claim reads rely on:
both body framings, ``100 Continue`` skipped, heads and bodies bounded, keep-alive, and every
answer that is not complete, uncompressed HTTP/1.x refused with an error saying so.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from driver.kube.transport import (
    MAX_HEAD,
    ConnectionClosedError,
    ProtocolError,
    Response,
    Transport,
    TransportSettings,
)
from tests.support.oneshot import OneShotServer

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


@pytest.fixture
def servers() -> Iterator[list[OneShotServer]]:
    made: list[OneShotServer] = []
    yield made
    for server in made:
        server.close()


def _get(
    servers: list[OneShotServer], wire: bytes, *, bytewise: bool = False, base_path: str = ""
) -> Response:
    server = OneShotServer(wire, bytewise=bytewise)
    servers.append(server)
    settings = TransportSettings("http", "127.0.0.1", server.port, base_path=base_path)
    transport = Transport(settings, connect_timeout=2.0, timeout=5.0)
    try:
        return transport.request("GET", "/apis/x?y=1", {"Authorization": "Bearer t"}, idempotent=True)
    finally:
        transport.close()


@pytest.mark.parametrize("bytewise", [pytest.param(False, id="one-piece"), pytest.param(True, id="bytewise")])
@pytest.mark.parametrize("wire", [pytest.param(OK, id="content-length"), pytest.param(CHUNKED, id="chunked")])
def test_reads_the_body_however_it_arrives(servers: list[OneShotServer], wire: bytes, bytewise: bool) -> None:
    """Content-Length and chunked bodies decode the same, in one piece or one byte per segment."""
    response = _get(servers, wire, bytewise=bytewise)
    assert (response.status, response.body, response.keep_alive) == (200, BODY, True)


def test_the_request_is_one_get_with_host_and_headers(servers: list[OneShotServer]) -> None:
    """A bare HTTP/1.1 GET: the target under the base path, Host, the caller's headers, nothing
    asking for compression."""
    _get(servers, OK, base_path="/k8s")
    (request,) = servers[0].requests
    lines = request.split(b"\r\n")
    assert lines[0] == b"GET /k8s/apis/x?y=1 HTTP/1.1"
    assert f"Host: 127.0.0.1:{servers[0].port}".encode() in lines
    assert b"Authorization: Bearer t" in lines
    assert not [line for line in lines if line.lower().startswith(b"accept-encoding")]


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        pytest.param("/a b", {}, id="space-in-target"),
        pytest.param("/a\r\nX: y", {}, id="crlf-in-target"),
        pytest.param("relative", {}, id="relative-target"),
        pytest.param("/a", {"Authorization": "Bearer t\r\nX-Evil: 1"}, id="crlf-in-value"),
        pytest.param("/a", {"Authorization": "Bearer t\n"}, id="newline-in-token"),
        pytest.param("/a", {"Bad Name": "v"}, id="space-in-name"),
        pytest.param("/a", {"X-A:B": "v"}, id="colon-in-name"),
        pytest.param("/a", {"": "v"}, id="empty-name"),
        pytest.param("/caf\u00e9", {}, id="non-ascii-target"),
        pytest.param("/a", {"X-Name": "\u20ac"}, id="value-not-latin-1"),
    ],
)
def test_the_request_refuses_injection(
    servers: list[OneShotServer], target: str, headers: dict[str, str]
) -> None:
    """Control characters in the target or a header (a token file's newline), or what the head
    cannot carry as given (a colon splitting a name, a character re-encoded), raise; nothing is
    sent."""
    server = OneShotServer(OK)
    servers.append(server)
    transport = Transport(TransportSettings("http", "127.0.0.1", server.port), connect_timeout=1, timeout=1)
    with pytest.raises(ValueError, match="invalid"):
        transport.request("GET", target, headers, idempotent=True)
    assert server.connections == 0


@pytest.mark.parametrize(
    "interim",
    [
        pytest.param(b"HTTP/1.1 100 Continue\r\n\r\n", id="100"),
        pytest.param(b"HTTP/1.1 100 Continue\r\n\r\n" * 8, id="eight"),
    ],
)
def test_interim_continue_answers_are_skipped(servers: list[OneShotServer], interim: bytes) -> None:
    """``100 Continue`` before the real answer is read past (nobody asks for one, a proxy may)."""
    assert _get(servers, interim + OK).body == BODY


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(b"HTTP/1.1 100 Continue\r\n\r\n" * 12_000 + OK, id="continue-flood"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\n"
            + b"".join(b"X-%d: %s\r\n" % (i, b"a" * 60_000) for i in range(6))
            + b"\r\n",
            id="huge-head",
        ),
    ],
)
def test_an_endless_head_is_refused(servers: list[OneShotServer], wire: bytes) -> None:
    """Interim answers without end, or a head of 360 KB in lines a parser accepts: refused once
    the head passes its bound (a parser alone reads 100s for ever), long before any deadline."""
    with pytest.raises(ProtocolError, match=f"head .* is over {MAX_HEAD} bytes"):
        _get(servers, wire)


def test_an_interim_answer_other_than_continue_is_refused(servers: list[OneShotServer]) -> None:
    """A 103 Early Hints is not taken for the answer (``http.client`` would): refused, since
    nobody here asks for hints and the real answer behind it cannot be read past it."""
    with pytest.raises(ProtocolError, match=r"interim answer \(103\)"):
        _get(servers, b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + OK)


def test_a_body_over_the_bound_is_refused(servers: list[OneShotServer]) -> None:
    """A body longer than ``max_body`` is refused after max_body + 1 bytes, not buffered whole."""
    server = OneShotServer(b"HTTP/1.1 200 OK\r\nContent-Length: 5000000\r\n\r\n" + b"x" * 5_000_000)
    servers.append(server)
    transport = Transport(
        TransportSettings("http", "127.0.0.1", server.port), connect_timeout=2.0, timeout=5.0, max_body=1000
    )
    with pytest.raises(ProtocolError, match="body is over 1000 bytes"):
        transport.request("GET", "/apis/x", {}, idempotent=True)


def test_error_status_keeps_its_body(servers: list[OneShotServer]) -> None:
    """A 404 comes back with its Status body (the message KubeError quotes)."""
    body = b'{"kind":"Status","code":404,"message":"not found"}'
    response = _get(servers, b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
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
def test_keep_alive_follows_version_and_connection_header(
    servers: list[OneShotServer], head: bytes, keep_alive: bool
) -> None:
    """HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 only when told to keep it."""
    response = _get(servers, head + b"\r\n{}")
    assert (response.body, response.keep_alive) == (b"{}", keep_alive)


def test_body_without_length_reads_to_the_end(servers: list[OneShotServer]) -> None:
    """No Content-Length and no chunking: the body ends with the connection, which is not reused."""
    response = _get(servers, b"HTTP/1.1 200 OK\r\n\r\n" + BODY, bytewise=True)
    assert (response.body, response.keep_alive) == (BODY, False)


def test_no_content_has_no_body(servers: list[OneShotServer]) -> None:
    """204 has no body even without Content-Length, and the connection stays usable."""
    response = _get(servers, b"HTTP/1.1 204 No Content\r\n\r\n")
    assert (response.status, response.body, response.keep_alive) == (204, b"", True)


def test_header_names_are_lower_case_and_repeats_join(servers: list[OneShotServer]) -> None:
    """Headers are looked up in lower case; a repeated header keeps both values."""
    response = _get(servers, b"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 0\r\n\r\n")
    assert response.headers["x-a"] == "1, 2"


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(OK[:20], id="head-cut"),
        pytest.param(OK[:-5], id="body-cut"),
        pytest.param(CHUNKED[:-30], id="chunk-cut"),
    ],
)
def test_an_answer_cut_off_is_refused(servers: list[OneShotServer], wire: bytes) -> None:
    """EOF inside the head or the body is a broken answer, never a shorter one (an empty body
    would decode as an empty object)."""
    with pytest.raises(ConnectionClosedError, match=r"\d+ bytes into the answer"):
        _get(servers, wire)


def test_hang_up_before_answering(servers: list[OneShotServer]) -> None:
    """EOF before any byte says so (on a fresh connection it is not retried)."""
    with pytest.raises(ConnectionClosedError, match="without answering"):
        _get(servers, b"")


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        pytest.param(b"SSH-2.0-OpenSSH\r\n\r\n", "BadStatusLine", id="not-http"),
        pytest.param(b"HTTP/1.1 2x0 OK\r\n\r\n", "BadStatusLine", id="bad-status"),
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
        pytest.param(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols", id="101"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", "more than 100 headers", id="headers"
        ),
    ],
)
def test_malformed_answers_raise_protocol_error(
    servers: list[OneShotServer], wire: bytes, message: str
) -> None:
    """Anything but well-formed, uncompressed HTTP/1.x is refused with a message saying what."""
    with pytest.raises(ProtocolError, match=message):
        _get(servers, wire)


def test_a_bad_chunk_size_is_refused(servers: list[OneShotServer]) -> None:
    """A chunk size that is not hex ends the read with an error naming it, not a short body."""
    with pytest.raises(ProtocolError, match="chunk size"):
        _get(servers, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
