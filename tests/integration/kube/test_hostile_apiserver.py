"""A claim read ends by its deadline whatever the apiserver does (issue 13, bounded waits).

The apiserver here is hostile (tests/integration/kube/hostile_api.py): every byte comes well within
the per-read timeout (30 s here), so before the overall deadline a read lasted as long as the
server liked. The bound asserted is generous (a third of that per-read timeout), not a timing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.errors import KubeError
from driver.kube.client import KubeClient, error_kind
from harness.fake_tls_api import write_kubeconfig
from tests.support.connectproxy import ConnectProxy

from .hostile_api import HostileApiServer, Mode

pytestmark = pytest.mark.fault

PER_READ = 30.0
DEADLINE = 1.0


@pytest.fixture
def hostile(request: pytest.FixtureRequest) -> Iterator[HostileApiServer]:
    mode, interval = request.param
    server = HostileApiServer(mode, interval)
    yield server
    server.close()


def _client(tmp_path: Path, server: str, **cluster: str) -> KubeClient:
    path = write_kubeconfig(tmp_path / "kubeconfig", server, cluster=dict(cluster), user={"token": "t"})
    return KubeClient(path, timeout=PER_READ, connect_timeout=1.0, read_deadline=DEADLINE)


CASES: list[tuple[Mode, float]] = [
    ("trickle-body", 0.1),
    ("trickle-head", 0.05),
    ("continue", 0.3),  # slow 100 Continues: the deadline comes first
    ("continue", 0.005),  # fast ones: refused after a few, long before the deadline
]


@pytest.mark.parametrize("hostile", CASES, indirect=True, ids=[f"{m}-{i}" for m, i in CASES])
@pytest.mark.parametrize("read", ["get", "list"])
def test_a_read_ends_by_its_deadline(hostile: HostileApiServer, tmp_path: Path, read: str) -> None:
    client = _client(tmp_path, hostile.url)
    started = time.monotonic()
    try:
        with pytest.raises(KubeError) as info:
            if read == "get":
                client.get_resource_claim("ns", "c1")
            else:
                client.list_resource_claims("ns", limit=64)
    finally:
        client.close()
    took = time.monotonic() - started
    assert took < PER_READ / 3, f"the read took {took:.1f} s"
    err = info.value
    assert err.status is None and err.transient
    assert "deadline" in str(err) or "interim" in str(err), str(err)
    if "deadline" in str(err):
        assert error_kind(err) == "timeout"


@pytest.mark.parametrize("hostile", [("trickle-body", 0.1)], indirect=True)
def test_reads_through_a_proxy_end_by_the_deadline_too(hostile: HostileApiServer, tmp_path: Path) -> None:
    """Through a CONNECT proxy the deadline holds the same: the tunnel is just bytes."""
    port = int(hostile.url.rsplit(":", 1)[1])
    proxy = ConnectProxy(routes={"apiserver.test": ("127.0.0.1", port)})
    client = _client(tmp_path, f"http://apiserver.test:{port}", **{"proxy-url": proxy.url})
    started = time.monotonic()
    try:
        with pytest.raises(KubeError, match="deadline of 1 s") as info:
            client.get_resource_claim("ns", "c1")
    finally:
        client.close()
        proxy.close()
    assert time.monotonic() - started < PER_READ / 3
    assert error_kind(info.value) == "timeout"
    assert proxy.tunnels == [f"apiserver.test:{port}"]
