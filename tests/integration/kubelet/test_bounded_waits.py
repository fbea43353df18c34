"""No kind of kubelet call can take the workers of another (issue 13, bounded waits).

Played against a real gRPC server on a unix socket: prepares stuck on a hostile apiserver (a real
TCP server that trickles bytes) must not delay an unrelated unprepare, and open health streams
must not starve prepare. Outcomes are asserted (who answered, with what); the only bounds are the
gRPC deadlines the kubelet itself would use, far above what a free worker needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import grpc
import pytest

from driver.claims.driver import ClaimsDriver
from driver.claims.parts import claims_journal
from driver.kube.client import KubeClient
from driver.kubelet.admission import CallKind
from driver.kubelet.serialize import SerializeLock
from driver.kubelet.server import KubeletPluginServer
from driver.plugin import ClaimRef
from harness.fake_tls_api import write_kubeconfig
from harness.kubeletclient import KubeletClient
from harness.poll import wait_for
from tests.integration.claims._world import DRIVER, NODE, make_inventory
from tests.integration.kube.hostile_api import HostileApiServer, wait_connections
from tests.support.fakeplugin import FakePlugin, StubClaims

from .conftest import Dirs

pytestmark = pytest.mark.fault

PREPARE_SLOTS = 16
STUCK = PREPARE_SLOTS + 4  # more prepares than there are prepare slots
READ_DEADLINE = 6.0  # long enough that the prepares are still stuck while the unprepare runs


@pytest.fixture
def hostile() -> Iterator[HostileApiServer]:
    server = HostileApiServer("trickle-body", 0.2)
    yield server
    server.close()


@pytest.fixture
def claims_server(dirs: Dirs, hostile: HostileApiServer) -> Iterator[KubeletPluginServer]:
    """The app's wiring: the kubelet plugin server reading claims from ``hostile`` before it takes
    the flock, around a ClaimsDriver."""
    kubeconfig = write_kubeconfig(dirs.root / "kubeconfig", hostile.url, cluster={}, user={"token": "t"})
    kube = KubeClient(kubeconfig, timeout=30.0, connect_timeout=1.0, read_deadline=READ_DEADLINE)
    cdi = dirs.root / "cdi"
    cdi.mkdir()
    dirs.plugin.mkdir()
    lock = SerializeLock(dirs.plugin / "serialize.lock")
    lock.open()
    inventory = make_inventory()
    driver = ClaimsDriver(
        driver_name=DRIVER,
        node_name=NODE,
        inventory=lambda: inventory,
        cdi_dir=cdi,
        plugin_dir=dirs.plugin,
        journal=claims_journal(cdi_dir=cdi, plugin_dir=dirs.plugin, driver_name=DRIVER, pool=NODE),
    )
    server = KubeletPluginServer(
        driver_name=DRIVER,
        node_name=NODE,
        registrar_dir=dirs.registrar,
        plugin_dir=dirs.plugin,
        plugin=driver,
        claim_source=kube,
        lock=lock,
        max_workers=PREPARE_SLOTS,
    )
    server.start()
    yield server
    server.stop(grace=0)
    driver.close()
    kube.close()
    lock.close()


def _call(fn: Callable[[], Any]) -> Any:
    """The response, or the gRPC error the call ended with."""
    try:
        return fn()
    except grpc.RpcError as exc:
        return exc


def test_unprepare_answers_while_prepares_are_stuck_on_the_apiserver(
    claims_server: KubeletPluginServer, hostile: HostileApiServer
) -> None:
    refs = [ClaimRef("default", f"stuck-{i}", f"{i:08x}-0000-4000-8000-000000000000") for i in range(STUCK)]
    with KubeletClient() as client, ThreadPoolExecutor(STUCK) as pool:
        socket = claims_server.dra_socket
        futures = [pool.submit(_call, partial(client.prepare, socket, [ref], timeout=45)) for ref in refs]
        wait_connections(hostile, PREPARE_SLOTS)  # every prepare slot now waits on the apiserver
        assert not all(f.done() for f in futures)
        other = ClaimRef("default", "other", "ffffffff-0000-4000-8000-000000000000")
        answer = client.unprepare(claims_server.dra_socket, [other], timeout=5)
        assert answer.claims[other.uid].error == ""  # unknown claim: done, and not held up
        outcomes = [f.result() for f in futures]

    refused = [o for o in outcomes if isinstance(o, grpc.RpcError)]
    answered = [o for o in outcomes if not isinstance(o, grpc.RpcError)]
    assert len(refused) == STUCK - PREPARE_SLOTS
    assert all(o.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for o in refused)
    assert "prepare calls are already running" in str(refused[0].details())
    assert len(answered) == PREPARE_SLOTS
    for response in answered:  # the read deadline gave each stuck claim its own error
        (result,) = response.claims.values()
        assert "deadline" in result.error, result.error
    assert claims_server.slots.refused[CallKind.PREPARE] == STUCK - PREPARE_SLOTS


def test_open_health_streams_do_not_starve_prepare(
    make_server: Callable[..., KubeletPluginServer], fake: FakePlugin, stub_claims: StubClaims
) -> None:
    """20 kubelets' worth of open health streams; a prepare still answers. Before: the streams took
    the 16 workers and the prepare waited for its 10 s deadline."""
    server = make_server(fake, health_resend_interval=60)
    server.start()
    opened: list[Any] = []
    with KubeletClient(stub_claims) as client, ThreadPoolExecutor(20) as pool:
        try:
            firsts = []
            for _ in range(20):
                stream = client.watch_health(server.dra_socket)
                opened.append(stream)
                firsts.append(pool.submit(_call, partial(next, stream)))
            ref = ClaimRef("default", "c", "c0000000-0000-4000-8000-000000000000")
            response = client.prepare(server.dra_socket, [ref], timeout=10)
            assert response.claims[ref.uid].error == ""
            assert client.unprepare(server.dra_socket, [ref], timeout=10).claims[ref.uid].error == ""
            outcomes = [f.result(timeout=10) for f in firsts]
        finally:
            for stream in opened:
                stream.cancel()
    refused = [o for o in outcomes if isinstance(o, grpc.RpcError)]
    assert all(o.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for o in refused)
    streams = server.slots.limits[CallKind.HEALTH]
    assert len(outcomes) - len(refused) == streams  # the first ones got their report
    assert len(refused) == 20 - streams


def test_a_closed_stream_gives_its_slot_back(
    make_server: Callable[..., KubeletPluginServer], fake: FakePlugin
) -> None:
    """Slots are not leaked: streams opened and cancelled many times over still get in."""
    server = make_server(fake, health_resend_interval=60)
    server.start()
    limit = server.slots.limits[CallKind.HEALTH]
    admitted = 0
    with KubeletClient() as client:
        for _ in range(3 * limit):
            stream = client.watch_health(server.dra_socket)
            next(stream)  # admitted: a slot was free (a refusal raises RESOURCE_EXHAUSTED here)
            admitted += 1
            stream.cancel()
            # the slot comes back when grpc reports the end of the RPC
            wait_for(lambda: server.slots.free(CallKind.HEALTH) == limit, 10, "the stream's slot back")
    assert admitted == 3 * limit
    assert server.slots.free(CallKind.HEALTH) == limit


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_every_dra_call_takes_a_slot_in_every_version(
    make_server: Callable[..., KubeletPluginServer], fake: FakePlugin, stub_claims: StubClaims, version: Any
) -> None:
    """The slots are taken for every version of the service: a server with none free refuses
    prepare and unprepare of each DRA version, and the driver never sees the call."""
    server = make_server(fake, max_workers=0, unprepare_slots=0)
    server.start()
    ref = ClaimRef("default", "c", "c0000000-0000-4000-8000-000000000000")
    with KubeletClient(stub_claims) as client:
        calls = (client.prepare, client.unprepare)
        outcomes = [_call(partial(call, server.dra_socket, [ref], version, timeout=10)) for call in calls]
    for outcome, kind in zip(outcomes, ("prepare", "unprepare"), strict=True):
        assert isinstance(outcome, grpc.RpcError), outcome
        assert outcome.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"0 {kind} calls are already running" in str(outcome.details())
    assert server.slots.refused[CallKind.PREPARE] == server.slots.refused[CallKind.UNPREPARE] == 1
    assert fake.calls == []  # neither call reached the driver


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
def test_every_health_stream_takes_a_slot_in_every_version(
    make_server: Callable[..., KubeletPluginServer], fake: FakePlugin, version: Any
) -> None:
    """No health stream slot: the stream of each health version is refused at once."""
    server = make_server(fake, health_streams=0)
    server.start()
    with KubeletClient() as client:
        outcome = _call(partial(next, client.watch_health(server.dra_socket, version)))
    assert isinstance(outcome, grpc.RpcError), outcome
    assert outcome.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert server.slots.refused[CallKind.HEALTH] == 1
