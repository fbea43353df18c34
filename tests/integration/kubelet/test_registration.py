"""Registration over real unix sockets: the answer, start order, socket files, timing."""

from __future__ import annotations

import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from driver.errors import ConfigError
from driver.kubelet.server import KubeletPluginServer
from driver.plugin import ClaimRef
from harness.kubeletclient import KubeletClient
from tests.support.fakeplugin import FAKE_DRIVER, FakePlugin

from .conftest import Dirs, PluginProcess

POD_UID = "5c3c8f9e-1111-4a2b-9c3d-0123456789ab"


def test_get_info_answer_is_exact(server: KubeletPluginServer, client: KubeletClient, dirs: Dirs) -> None:
    """GetInfo: type DRAPlugin, driver name, absolute DRA socket, four services in order."""
    info = client.get_info(dirs.registrar / f"{FAKE_DRIVER}-reg.sock")
    assert info.type == "DRAPlugin"
    assert info.name == FAKE_DRIVER
    assert info.endpoint == str(dirs.plugin / "dra.sock")
    assert Path(info.endpoint).is_absolute()
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]


def test_registered_event_follows_notify(server: KubeletPluginServer, client: KubeletClient) -> None:
    """wait_registered is False until the kubelet notifies success, then True."""
    assert not server.wait_registered(0.05)
    registration = client.register(server.registration_socket)
    assert registration.dra_service == "v1.DRAPlugin"
    assert registration.health_service == "v1.DRAResourceHealth"
    assert server.wait_registered(1.0)
    assert server.registration_result is not None and server.registration_result.registered


def test_rejected_registration_is_recorded(server: KubeletPluginServer, client: KubeletClient) -> None:
    """Notify(false) is answered OK, records the kubelet's error and clears the registered event."""
    client.notify(server.registration_socket, True)
    assert server.wait_registered(1.0)
    client.notify(server.registration_socket, False, "plugin validation failed")
    assert not server.wait_registered(0)
    assert server.registration_result is not None
    assert server.registration_result.error == "plugin validation failed"


def test_without_health_source_only_dra_is_advertised(
    make_server: Callable[..., KubeletPluginServer], fake: FakePlugin, client: KubeletClient
) -> None:
    """No health source: health is neither advertised nor served (a 1.36 kubelet gets UNIMPLEMENTED)."""
    srv = make_server(fake, health=None)
    srv.start()
    registration = client.register(srv.registration_socket)
    assert list(registration.info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert registration.health_service is None
    with pytest.raises(grpc.RpcError) as err:
        next(iter(client.watch_health(srv.dra_socket)))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]


def test_registered_the_moment_the_kubelet_notifies(
    make_server: Callable[..., KubeletPluginServer], fake: FakePlugin, client: KubeletClient
) -> None:
    """start() returns with the registration socket served, and the server counts as registered
    as soon as the kubelet's notify is answered: nothing in between waits or polls."""
    srv = make_server(fake)
    srv.start()
    assert stat.S_ISSOCK(Path(srv.registration_socket).lstat().st_mode)
    assert not srv.wait_registered(0), "registered only once the kubelet says so"
    client.register(srv.registration_socket)
    assert srv.wait_registered(0)


def test_rolling_update_socket_names(
    make_server: Callable[..., KubeletPluginServer], fake: FakePlugin, client: KubeletClient, dirs: Dirs
) -> None:
    """With a pod UID both sockets carry it, and the registration answer points at the unique one."""
    srv = make_server(fake, pod_uid=POD_UID)
    srv.start()
    assert srv.registration_socket == dirs.registrar / f"{FAKE_DRIVER}-{POD_UID}-reg.sock"
    info = client.get_info(srv.registration_socket)
    assert info.endpoint == str(dirs.plugin / f"dra-{POD_UID}.sock")


def _leave_socket(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))  # closed without unlink: a stale socket file, like after a crash


def test_stale_sockets_are_replaced(
    make_server: Callable[..., KubeletPluginServer], fake: FakePlugin, client: KubeletClient, dirs: Dirs
) -> None:
    """Socket files left by a crashed run are removed and served anew."""
    _leave_socket(dirs.registrar / f"{FAKE_DRIVER}-reg.sock")
    _leave_socket(dirs.plugin / "dra.sock")
    srv = make_server(fake)
    srv.start()
    client.register(srv.registration_socket)
    response = client.prepare(srv.dra_socket, [ClaimRef("default", "c", "uid-1")])
    assert list(response.claims) == ["uid-1"]


def test_refuses_to_replace_a_regular_file(
    make_server: Callable[..., KubeletPluginServer], fake: FakePlugin, dirs: Dirs
) -> None:
    """A non-socket file at our socket path is a configuration error naming the path, left intact."""
    target = dirs.registrar / f"{FAKE_DRIVER}-reg.sock"
    target.write_text("not a socket")
    srv = make_server(fake)
    with pytest.raises(ConfigError, match="is not a unix socket"):
        srv.start()
    srv.stop()
    assert target.read_text() == "not a socket"
    assert not (dirs.plugin / "dra.sock").exists()


def test_missing_registrar_dir_is_a_config_error(
    make_server: Callable[..., KubeletPluginServer], fake: FakePlugin, dirs: Dirs
) -> None:
    """The kubelet's plugins_registry must exist; we say which path is missing."""
    with pytest.raises(ConfigError, match=r"registrar directory .* does not exist"):
        make_server(fake, registrar_dir=dirs.root / "nope").start()


def test_stop_removes_both_sockets(server: KubeletPluginServer, dirs: Dirs) -> None:
    """stop() removes our two sockets (and nothing else), and is idempotent."""
    assert stat.S_ISSOCK(server.registration_socket.lstat().st_mode)
    assert stat.S_ISSOCK(server.dra_socket.lstat().st_mode)
    server.stop()
    server.stop()
    assert sorted(p.name for p in dirs.registrar.iterdir()) == []
    assert sorted(p.name for p in dirs.plugin.iterdir()) == ["serialize.lock"]


def test_stop_leaves_a_successors_sockets_alone(
    make_server: Callable[..., KubeletPluginServer], client: KubeletClient, dirs: Dirs
) -> None:
    """A successor that replaced our (same-named) sockets keeps them when we stop afterwards."""
    old = make_server(FakePlugin())
    old.start()
    new = make_server(FakePlugin())
    new.start()  # removes the old sockets as stale and binds its own at the same paths
    old.stop()
    assert new.registration_socket.exists() and new.dra_socket.exists()
    client.register(new.registration_socket)
    assert new.wait_registered(1.0)
    assert list(client.prepare(new.dra_socket, [ClaimRef("default", "c", "uid-1")]).claims) == ["uid-1"]


def test_dra_socket_listens_before_registration_socket_appears(
    spawn: Callable[..., PluginProcess], dirs: Dirs
) -> None:
    """The moment the registration socket is visible, the DRA socket already accepts connections."""
    plugin = spawn(wait=False)
    deadline = time.monotonic() + 30
    while not plugin.registration_socket.exists():
        assert time.monotonic() < deadline and plugin.proc.poll() is None, plugin.logs()
        time.sleep(0.001)
    with socket.socket(socket.AF_UNIX) as probe:
        probe.connect(str(plugin.dra_socket))
    assert [p.name for p in dirs.registrar.iterdir()] == [plugin.registration_socket.name]


def test_sigterm_removes_sockets_and_exits_cleanly(
    spawn: Callable[..., PluginProcess], client: KubeletClient, dirs: Dirs
) -> None:
    """SIGTERM: the process removes both sockets and exits 0."""
    plugin = spawn()
    client.register(plugin.registration_socket)
    assert plugin.terminate() == 0, plugin.logs()
    assert not plugin.registration_socket.exists()
    assert not plugin.dra_socket.exists()
    assert "kubelet plugin server stopped" in plugin.logs()
