"""The transport against answers a hostile or broken server sends: fuzzed, cut, flipped.

Whatever bytes come back, a request ends in one of three ways: a :class:`Response` whose body
is what the answer's framing says, or :class:`ProtocolError`, or an ``OSError`` (the
:class:`ConnectionClosedError` family). Never another exception (a decoding error, an index
error from a parser), never a body cut short of its framing, never more than ``max_body``.
One loopback server plays every example; it closes the connection after each answer, so an
answer that never ends ends at EOF.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.kube.transport import MAX_FIELDS, ProtocolError, Response, Transport, TransportSettings
from tests.support.oneshot import OneShotServer

BODY = b'{"kind":"ResourceClaim","metadata":{"name":"c1","uid":"u"}}'
SIZED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n" % (20, BODY[:20])
    + b"%x\r\n%s\r\n" % (len(BODY) - 20, BODY[20:])
    + b"0\r\n\r\n"
)
CONTINUED = b"HTTP/1.1 100 Continue\r\n\r\n" + SIZED
WIRES = [SIZED, CHUNKED, CONTINUED]
MAX_BODY = 200


@pytest.fixture(scope="module")
def player() -> Iterator[OneShotServer]:
    served = OneShotServer()
    yield served
    served.close()


def _request(player: OneShotServer, wire: bytes) -> Response | BaseException:
    player.wire = wire
    transport = Transport(
        TransportSettings("http", "127.0.0.1", player.port),
        connect_timeout=2.0,
        timeout=3.0,
        max_body=MAX_BODY,
    )
    try:
        return transport.request("GET", "/apis/x", {}, idempotent=False)
    except (ProtocolError, OSError) as exc:  # anything else fails the test
        return exc
    finally:
        transport.close()


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(wire=st.sampled_from(WIRES), data=st.data())
def test_an_answer_cut_anywhere_is_never_a_shorter_body(
    player: OneShotServer, wire: bytes, data: st.DataObject
) -> None:
    """Every proper prefix of a framed answer is refused (an empty or half body would decode as
    another object); the whole answer reads back whole."""
    cut = data.draw(st.integers(min_value=0, max_value=len(wire) - 1))
    assert isinstance(_request(player, wire[:cut]), BaseException)
    whole = _request(player, wire)
    assert isinstance(whole, Response) and whole.body == BODY


@FUZZ
@given(
    wire=st.sampled_from(WIRES),
    edits=st.lists(
        st.tuples(st.integers(min_value=0), st.binary(min_size=0, max_size=8)), min_size=1, max_size=4
    ),
)
def test_a_mangled_answer_is_an_answer_or_an_error_nothing_else(
    player: OneShotServer, wire: bytes, edits: list[tuple[int, bytes]]
) -> None:
    """Bytes replaced or inserted anywhere: a Response within the body bound, or a named error."""
    mangled = bytearray(wire)
    for position, data in edits:
        at = position % (len(mangled) + 1)
        mangled[at : at + len(data) // 2] = data
    outcome = _request(player, bytes(mangled))
    if isinstance(outcome, Response):
        assert len(outcome.body) <= MAX_BODY
        assert all(name == name.lower() for name in outcome.headers)


@FUZZ
@given(garbage=st.binary(min_size=1, max_size=300))
def test_bytes_that_are_not_http_are_refused(player: OneShotServer, garbage: bytes) -> None:
    outcome = _request(player, garbage)
    if isinstance(outcome, Response):  # garbage that happens to be a status line and a head
        assert garbage.startswith(b"HTTP/")


def test_the_field_bound_counts_repeats(player: OneShotServer) -> None:
    """One name repeated past the bound is refused like distinct names are."""
    wire = b"HTTP/1.1 200 OK\r\n" + b"Set-Cookie: a\r\n" * (MAX_FIELDS + 1) + b"Content-Length: 0\r\n\r\n"
    outcome = _request(player, wire)
    assert isinstance(outcome, ProtocolError) and "more than" in str(outcome)
