"""DRAResourceHealth v1 and v1alpha1 streams over a real unix socket."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import grpc
import pytest

from driver.kubelet.server import KubeletPluginServer
from driver.plugin import ClaimRef, DeviceHealth, HealthState
from harness.kubeletclient import KubeletClient
from tests.support.fakeplugin import FakePlugin
from tests.support.within import within

VERSIONS = [pytest.param("v1", id="v1"), pytest.param("v1alpha1", id="v1alpha1")]


def states(report: object) -> dict[str, int]:
    return {d.device.device_name: d.health for d in report.devices}  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", VERSIONS)
def test_initial_snapshot_then_periodic_resend(
    server: KubeletPluginServer, client: KubeletClient, fake: FakePlugin, version: str
) -> None:
    """Full snapshot at once, then a resend after the interval (0.3 s) with nothing changed."""
    before = int(time.time())
    t0 = time.monotonic()  # before the stream: the server's interval starts after its first send
    stream = client.watch_health(server.dra_socket, version)  # type: ignore[arg-type]
    try:
        first = next(stream)
        after = time.time()
        assert states(first) == {"dev-0": 1, "dev-1": 1, "dev-2": 1, "dev-3": 1}
        assert {d.device.pool_name for d in first.devices} == {"fake-pool"}
        assert all(before <= d.last_updated_time <= after for d in first.devices), "stamped when sent"

        resent = within(10, lambda: next(stream), "the resend")  # the default interval is 10 s
        assert time.monotonic() - t0 >= 0.25, "a resend waits for the interval"
        assert states(resent) == states(first)
    finally:
        stream.cancel()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_change_is_pushed_without_waiting_for_the_resend(
    make_server: Callable[..., KubeletPluginServer], client: KubeletClient, fake: FakePlugin, version: str
) -> None:
    """With a 60 s resend interval, only the change itself can end the wait within the guard."""
    srv = make_server(fake, health_resend_interval=60)
    srv.start()
    stream = client.watch_health(srv.dra_socket, version)  # type: ignore[arg-type]
    try:
        next(stream)
        fake.set_health("dev-2", HealthState.UNHEALTHY, "link down")
        changed = within(10, lambda: next(stream), "the change")
        assert states(changed)["dev-2"] == 2
        assert [d.message for d in changed.devices if d.device.device_name == "dev-2"] == ["link down"]
    finally:
        stream.cancel()


def test_long_message_is_truncated(
    server: KubeletPluginServer, client: KubeletClient, fake: FakePlugin
) -> None:
    """Messages are cut to 1024 characters, ending in '...'."""
    fake.set_health("dev-0", HealthState.UNKNOWN, "e" * 5000)
    stream = client.watch_health(server.dra_socket)
    try:
        (msg,) = [d.message for d in next(stream).devices if d.device.device_name == "dev-0"]
    finally:
        stream.cancel()
    assert len(msg) == 1024 and msg.endswith("...")


def test_two_streams_and_cancel(server: KubeletPluginServer, client: KubeletClient, fake: FakePlugin) -> None:
    """Both versions stream at once; cancelling one leaves the other receiving changes."""
    v1 = client.watch_health(server.dra_socket, "v1")
    alpha = KubeletClient()
    try:
        old = alpha.watch_health(server.dra_socket, "v1alpha1")
        next(v1), next(old)
        old.cancel()
        fake.set_health("dev-1", HealthState.UNHEALTHY)
        assert states(next(v1))["dev-1"] == 2
        with pytest.raises(grpc.RpcError) as err:
            next(old)
        assert err.value.code() == grpc.StatusCode.CANCELLED  # type: ignore[attr-defined]
    finally:
        v1.cancel()
        alpha.close()


def test_stream_ends_cleanly_when_server_stops(
    make_server: Callable[..., KubeletPluginServer], client: KubeletClient, fake: FakePlugin
) -> None:
    """stop() ends open streams with status OK at once, not after the grace or the resend interval."""
    srv = make_server(fake, health_resend_interval=60)
    srv.start()
    stream = client.watch_health(srv.dra_socket)
    next(stream)
    received: list[object] = []
    done = threading.Event()

    def drain() -> None:
        received.extend(stream)  # ends without an exception when the server closes with OK
        done.set()

    reader = threading.Thread(target=drain)
    reader.start()
    # The grace and the resend interval are both 60 s: a stream that waited for either is still
    # open when the 10 s guard ends.
    stopper = threading.Thread(target=srv.stop, kwargs={"grace": 60})
    stopper.start()
    assert done.wait(10), "the stream waited for the grace or the resend"
    reader.join()
    stopper.join(10)
    assert stream.code() == grpc.StatusCode.OK  # type: ignore[attr-defined]


def test_prepared_device_does_not_change_wire_identity(
    server: KubeletPluginServer, client: KubeletClient, fake: FakePlugin
) -> None:
    """Health reports identify devices by pool and name whether or not they are prepared."""
    client.prepare(server.dra_socket, [ClaimRef("default", "a", "uid-a")])
    stream = client.watch_health(server.dra_socket)
    try:
        report = next(stream)
    finally:
        stream.cancel()
    assert sorted(states(report)) == ["dev-0", "dev-1", "dev-2", "dev-3"]


class BrokenHealth:
    """A health source whose snapshot fails (a sysfs read error, say)."""

    def health_snapshot(self) -> Sequence[DeviceHealth]:
        raise OSError("sysfs went away")

    def wait_for_change(self, timeout: float) -> bool:
        time.sleep(min(timeout, 0.05))
        return False


def test_failing_source_is_unavailable_not_unimplemented(
    make_server: Callable[..., KubeletPluginServer], client: KubeletClient, fake: FakePlugin
) -> None:
    """A broken health source ends the stream with UNAVAILABLE so the kubelet retries."""
    srv = make_server(fake, health=BrokenHealth())
    srv.start()
    with pytest.raises(grpc.RpcError) as err:
        next(client.watch_health(srv.dra_socket, "v1alpha1"))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert "sysfs went away" in err.value.details()  # type: ignore[attr-defined]
