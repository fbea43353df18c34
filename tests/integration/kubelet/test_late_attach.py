"""A server that serves its sockets before its driver is attached (how ``numadra run`` starts).

The kubelet may register the plugin and call it at once; calls that arrive before
:meth:`KubeletPluginServer.attach` wait and then get the answers they would have got later, and
a server stopped before the attach ends them instead of leaving them waiting. Real unix sockets
and gRPC, played by the test kubelet client.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import grpc
import pytest

from driver.kubelet.server import KubeletPluginServer
from driver.plugin import ClaimRef
from harness.kubeletclient import KubeletClient
from tests.support.fakeplugin import FAKE_DRIVER, FakePlugin, StubClaims

from .conftest import Dirs

WAIT = 30.0  # bounds on what must happen; nothing is timed
#: how long the calls are seen waiting before the attach (they would be answered in milliseconds)
PENDING = 0.3


@pytest.fixture
def unattached(dirs: Dirs) -> Iterator[KubeletPluginServer]:
    """A started server with health services and no driver yet."""
    server = KubeletPluginServer(
        driver_name=FAKE_DRIVER,
        node_name="node-a",
        registrar_dir=dirs.registrar,
        plugin_dir=dirs.plugin,
        serve_health=True,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=0)


def _first_report(client: KubeletClient, server: KubeletPluginServer) -> Any:
    stream = client.watch_health(server.dra_socket)
    try:
        return next(iter(stream))
    finally:
        stream.cancel()


def test_calls_before_the_attach_wait_and_get_the_driver_s_answers(
    unattached: KubeletPluginServer, fake: FakePlugin, stub_claims: StubClaims, client: KubeletClient
) -> None:
    """The registration is answered at once; a prepare, an unprepare and a health stream sent right
    after it wait for the driver, then get what the driver says, nothing before."""
    server = unattached
    registration = client.register(server.registration_socket)
    assert "v1.DRAResourceHealth" in registration.info.supported_versions
    ref, other = ClaimRef("default", "early", "uid-early"), ClaimRef("default", "gone", "uid-gone")
    with ThreadPoolExecutor(3) as pool:
        prepared = pool.submit(client.prepare, server.dra_socket, [ref])
        unprepared = pool.submit(client.unprepare, server.dra_socket, [other])
        report = pool.submit(_first_report, client, server)
        calls: list[Future[Any]] = [prepared, unprepared, report]
        done, _ = wait(calls, timeout=PENDING)
        assert done == set(), [call.exception() for call in done]
        assert fake.calls == []

        server.attach(fake, stub_claims, fake)

        entry = prepared.result(WAIT).claims[ref.uid]
        assert entry.error == ""
        (device,) = entry.devices
        assert list(device.cdi_device_ids) == [f"fake.numadra.dev/claim={ref.uid}-{device.device_name}"]
        assert unprepared.result(WAIT).claims[other.uid].error == ""
        assert {d.device.device_name for d in report.result(WAIT).devices} == set(fake.devices)
    assert ("prepare", (ref.uid,)) in fake.calls


def test_a_stop_before_the_attach_ends_the_waiting_calls(
    unattached: KubeletPluginServer, client: KubeletClient
) -> None:
    """A start that fails after the sockets appeared stops the server: a prepare waiting for the
    driver ends with UNAVAILABLE (the kubelet retries it) instead of waiting on."""
    server = unattached
    ref = ClaimRef("default", "early", "uid-early")
    with ThreadPoolExecutor(1) as pool:
        prepared = pool.submit(client.prepare, server.dra_socket, [ref])
        assert wait([prepared], timeout=PENDING).done == set()
        server.stop()
        with pytest.raises(grpc.RpcError) as raised:
            prepared.result(WAIT)
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "stopping" in str(raised.value.details())
