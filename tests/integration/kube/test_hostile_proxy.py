"""A request through a hostile CONNECT proxy ends by its deadline (issue 32, one deadline per request).

The proxy (tests/integration/kube/hostile_proxy.py) is a real TCP server on loopback that keeps
the tunnel from coming up: its reply trickles, its headers never end, or the TLS handshake after
it trickles. Every byte comes well within the per-operation timeouts (30 s here, connect and
read), so only the request's one deadline ends the dial, in every phase. The bounds asserted are
generous (a sixth of those timeouts; a CPU budget far above what a refused head costs), not
timings: before the fix the reads lasted as long as the proxy liked, and a flood of header lines
kept a core busy for all of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.errors import KubeError
from driver.kube.client import KubeClient, error_kind
from driver.kubelet.claims import ClaimFetcher
from driver.plugin import ClaimRef
from harness.fake_tls_api import write_kubeconfig

from .hostile_proxy import HostileProxy, ProxyMode

pytestmark = pytest.mark.fault

PER_OP = 30.0  # connect and read timeouts: never reached by a proxy that sends a byte a moment
DEADLINE = 1.5  # the claim-read deadline of these clients
BOUND = PER_OP / 6  # what "ended by the deadline" is held to: generous, and far below PER_OP
CPU_BOUND = 1.0  # seconds of this thread's CPU a refused dial may cost


@pytest.fixture
def hostile(request: pytest.FixtureRequest) -> Iterator[HostileProxy]:
    server = HostileProxy(request.param, 0.2)
    yield server
    server.close()


def _client(tmp_path: Path, proxy: HostileProxy, scheme: str) -> KubeClient:
    server = f"{scheme}://apiserver.test:6443"  # resolves nowhere: only the proxy could reach it
    path = write_kubeconfig(
        tmp_path / "kubeconfig", server, cluster={"proxy-url": proxy.url}, user={"token": "t"}
    )
    return KubeClient(path, timeout=PER_OP, connect_timeout=PER_OP, read_deadline=DEADLINE)


MODES: list[tuple[ProxyMode, str]] = [
    ("status-trickle", "http"),
    ("header-trickle", "http"),
    ("header-flood", "http"),
    ("tls-trickle", "https"),
]


@pytest.mark.parametrize(("hostile", "scheme"), MODES, indirect=["hostile"], ids=[mode for mode, _ in MODES])
def test_a_claim_read_through_a_hostile_proxy_ends_by_its_deadline(
    hostile: HostileProxy, scheme: str, tmp_path: Path
) -> None:
    client = _client(tmp_path, hostile, scheme)
    started, cpu = time.monotonic(), time.thread_time()
    try:
        with pytest.raises(KubeError) as info:
            client.get_resource_claim("ns", "c1")
    finally:
        client.close()
    took, burnt = time.monotonic() - started, time.thread_time() - cpu
    assert took < BOUND, f"the read took {took:.1f} s"
    assert burnt < CPU_BOUND, f"the read cost {burnt:.2f} s of CPU"
    err = info.value
    assert err.status is None and err.transient
    assert hostile.connections == 1  # no second dial: the first one spent the deadline
    if hostile.mode == "header-flood":
        assert "more than 100 headers" in str(err), str(err)  # refused at the count bound, at once
    else:
        assert f"deadline of {DEADLINE:g} s" in str(err), str(err)
        assert error_kind(err) == "timeout"


@pytest.mark.parametrize("hostile", ["header-trickle"], indirect=True)
def test_a_prepare_through_a_hostile_proxy_gives_the_claim_its_error_in_time(
    hostile: HostileProxy, tmp_path: Path
) -> None:
    """The prepare path (the kubelet layer's claim fetcher) turns the stuck dial into the claim's
    own error, within the claim-read deadline, instead of holding the kubelet's call."""
    client = _client(tmp_path, hostile, "http")
    fetcher = ClaimFetcher(client)
    ref = ClaimRef("ns", "c1", "0000000a-0000-4000-8000-000000000000")
    started = time.monotonic()
    try:
        fetched = fetcher.fetch([ref])
    finally:
        fetcher.close()
        client.close()
    assert time.monotonic() - started < BOUND
    error = fetched[ref.uid]
    assert isinstance(error, str), error
    assert "ns/c1" in error and f"deadline of {DEADLINE:g} s" in error, error
