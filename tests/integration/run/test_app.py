"""The App object in this process: component wiring, idempotent stop, fatal background errors."""

from __future__ import annotations

import fcntl
import gc
import os
import signal
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


def test_background_start_waits_for_the_kubelets_registration(node: RunNode) -> None:
    """Steps 5-9 (publisher, health thread, metrics) start once the kubelet registered us, not
    while its GetInfo and NotifyRegistrationStatus compete with them for the GIL; the collector,
    off during the start-up, is on again afterwards."""
    app = App(replace(_config(node), registration_wait=120))
    starter = threading.Thread(target=app.start, daemon=True)
    gc.disable()  # as `numadra run` leaves it to App.start
    try:
        starter.start()
        wait_for(node.registration_socket.exists, 20, "the registration socket")
        starter.join(0.5)
        assert starter.is_alive(), "started the background without waiting for the registration"
        assert app.publisher is None and app.metrics is None
        node.kubelet.register(node.registration_socket)
        starter.join(60)  # far below registration_wait: the registration ended the wait
        assert not starter.is_alive()
        assert gc.isenabled()
        assert app.publisher is not None
        assert app.publisher.published.wait(30)
    finally:
        gc.enable()
        app.stop()
        starter.join(10)


def test_without_a_kubelet_the_background_starts_after_the_wait(node: RunNode) -> None:
    """No kubelet registers (it is down, or slow): after registration_wait the rest starts anyway."""
    app = App(replace(_config(node), registration_wait=0.2))
    app.start()
    try:
        assert app.kubelet is not None and not app.kubelet.registered.is_set()
        assert app.publisher is not None
        assert app.publisher.published.wait(30)
    finally:
        app.stop()


def test_stop_while_waiting_for_the_registration_skips_the_background(node: RunNode) -> None:
    """SIGTERM during the wait: start returns without starting the background; stop removes the
    sockets."""
    app = App(replace(_config(node), registration_wait=120))
    starter = threading.Thread(target=app.start, daemon=True)
    starter.start()
    try:
        wait_for(node.registration_socket.exists, 20, "the registration socket")
        app.request_stop()
        starter.join(30)
        assert not starter.is_alive(), "the stop request did not end the wait"
        assert app.publisher is None and app.metrics is None
    finally:
        app.stop()
        starter.join(10)
    assert not node.registration_socket.exists()
    assert not node.dra_socket.exists()


def test_signal_handler_takes_no_lock_the_main_thread_may_hold(node: RunNode) -> None:
    """A SIGTERM that lands while the main thread holds the shutdown Event's lock (inside a wait)
    or the log's must not wait for that lock: the handler runs in that very thread, so it would
    wait forever (the process hung on SIGTERM that way). The handler notes the signal; the main
    loop acts on it."""
    app = App(_config(node))
    done = threading.Event()

    def main_thread_in_a_wait() -> None:
        with app._shutdown._cond:  # type: ignore[attr-defined]  # what Event.wait holds at times
            app._on_signal(signal.SIGTERM, None)
        done.set()

    thread = threading.Thread(target=main_thread_in_a_wait, daemon=True)
    thread.start()
    assert done.wait(10), "the signal handler waited for a lock its own thread held"
    app._handle_signals()  # what the main loop does next
    assert app._shutdown.is_set()
