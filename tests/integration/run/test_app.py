"""The App object in this process: component wiring, idempotent stop, fatal background errors."""

from __future__ import annotations

import fcntl
import os
import threading
from dataclasses import replace

import pytest

from driver.app import App, RunConfig
from driver.errors import DriverError
from driver.kube.client import shared_client
from driver.kubelet.paths import SERIALIZE_LOCK_NAME
from tests.integration.run.conftest import GPU, NODE, RunNode, wait_for


def _config(node: RunNode) -> RunConfig:
    return RunConfig(
        node_name=NODE,
        host_root=node.host,
        kubeconfig=node.api.kubeconfig_path,
        registrar_dir=node.registrar_dir,
        plugin_dir=node.plugin_dir,
        cdi_dir=node.cdi_dir,
        hotplug="off",
        rescan_interval=0,
        health_interval=0.5,
    )


def test_start_wires_components_and_stop_is_idempotent(node: RunNode) -> None:
    """After start: registered server, health in the stream source, slices published; stop twice is fine."""
    app = App(replace(_config(node), claim_read_timeout=3.5))
    app.start()
    try:
        assert shared_client(node.api.kubeconfig_path).read_deadline == 3.5  # --claim-read-timeout
        node.kubelet.register(node.registration_socket)
        assert app.kubelet is not None
        assert app.kubelet.wait_registered(5)
        assert app.publisher is not None
        assert app.publisher.published.wait(30)
        assert GPU in node.device_names()
        assert app.monitor is not None
        assert {h.device_name for h in app.monitor.health_snapshot()} >= {GPU}
        assert app.metrics_server is None  # no --metrics-address: no HTTP endpoint
        assert app.metrics is not None  # but the counters exist
    finally:
        app.stop()
    app.stop()
    assert not node.registration_socket.exists()
    assert not node.dra_socket.exists()


def test_fatal_background_error_ends_run_with_its_reason(node: RunNode) -> None:
    """A non-recoverable error reported by a component stops run() with a DriverError (exit 1)."""
    app = App(_config(node))

    def fail_when_registered() -> None:
        wait_for(node.registration_socket.exists, 20, "the registration socket")
        assert app.claims is not None
        app.claims.handle_error(RuntimeError("health stream broke"), "health fan-out")

    thread = threading.Thread(target=fail_when_registered, daemon=True)
    thread.start()
    with pytest.raises(DriverError, match="health fan-out: health stream broke"):
        app.run()
    thread.join(5)
    assert not node.registration_socket.exists()


def test_start_up_reconcile_waits_for_the_other_process_lock(node: RunNode) -> None:
    """During a rolling update the other process may be preparing: start-up reconcile (which may
    re-create files) runs under the cross-process flock, so start waits while another holds it."""
    node.plugin_dir.mkdir(parents=True, exist_ok=True)
    other = os.open(node.plugin_dir / SERIALIZE_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(other, fcntl.LOCK_EX)
    app = App(_config(node))
    starter = threading.Thread(target=app.start)
    try:
        starter.start()
        starter.join(0.5)
        assert starter.is_alive(), "started without the lock"
        assert not node.registration_socket.exists()
    finally:
        fcntl.flock(other, fcntl.LOCK_UN)
        os.close(other)
    starter.join(30)
    try:
        assert not starter.is_alive()
        assert node.registration_socket.exists()
    finally:
        app.stop()
