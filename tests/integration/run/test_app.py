"""``numadra run`` in this process: the builder's parts, the start order, signals, a fatal error.

The real-process tests (test_run.py) see what a node sees; these drive :func:`driver.cli.run.serve`
and :func:`driver.app.build` directly, to see when each stage starts. What they observe is public:
the sockets, the fake apiserver's requests and objects, the collector's state, the exit.
"""

from __future__ import annotations

import fcntl
import gc
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path

import pytest

from driver.app import build, build_background, build_front
from driver.cli.run import Shutdown, Signals, serve
from driver.config import RunConfig
from driver.errors import DriverError, RecoverableError
from driver.kubelet.paths import SERIALIZE_LOCK_NAME
from driver.lifecycle import Lifecycle
from driver.plugin import ClaimRef
from tests.integration.run.conftest import GPU, NODE, RunNode, gpu_cpu_claim, wait_for

WAIT = 30.0  # generous bounds on what must happen; nothing is timed


def _config(node: RunNode, **changes: object) -> RunConfig:
    config = RunConfig(
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
    return replace(config, **changes)


def _put_claim(node: RunNode, name: str) -> ClaimRef:
    """A claim of the GPU and two CPUs in the fake apiserver."""
    uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.root.name}-{name}"))
    node.api.put_object(gpu_cpu_claim(uid, name, 2, GPU))
    return ClaimRef("default", name, uid)


class _Serving:
    """:func:`serve` on a thread, as ``numadra run`` runs it on the main thread."""

    def __init__(self, config: RunConfig) -> None:
        self.signals = Signals()
        self.shutdown = Shutdown()
        self.exit: int | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, args=(config,), daemon=True)
        self._thread.start()

    def _serve(self, config: RunConfig) -> None:
        try:
            self.exit = serve(config, self.signals, self.shutdown)
        except BaseException as exc:
            self.error = exc

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def still_serving_after(self, seconds: float) -> bool:
        """True when serve neither returned nor failed within ``seconds``."""
        self._thread.join(seconds)
        return self._thread.is_alive() and self.error is None

    def join(self, timeout: float = WAIT) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "serve did not return"

    def sigterm(self) -> int | None:
        """What the signal handler does, then wait for the exit."""
        self.signals.note(signal.SIGTERM)
        self.join()
        return self.exit


def _waits_for_flock(inode: int) -> bool:
    """True while some process waits for a flock on that inode (a "->" line of /proc/locks)."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 6 and fields[1] == "->" and fields[2] == "FLOCK" and fields[6].endswith(f":{inode}"):
            return True
    return False


@pytest.fixture
def collector() -> Iterator[None]:
    """serve turns the collector off while it starts and freezes the heap after: give the rest of
    the session its collector back as it was."""
    was = gc.isenabled()
    gc.unfreeze()
    yield
    gc.unfreeze()
    if was:
        gc.enable()


def test_build_wires_the_parts_and_stop_undoes_them(node: RunNode) -> None:
    """All stages built and started: registered server, health for every device, slices published;
    stopping twice is fine and leaves no socket."""
    config = _config(node, claim_read_timeout=3.5)
    lifecycle = Lifecycle()
    front = build_front(config)
    try:
        lifecycle.start(front.steps)
        core = build(front, on_fatal=lambda reason: None)
        assert core.kube.read_deadline == 3.5  # --claim-read-timeout
        lifecycle.start(core.steps)
        node.kubelet.register(node.registration_socket)
        assert core.kubelet.wait_registered(WAIT)
        background = build_background(core)
        lifecycle.start(background.steps)
        assert "metrics server" not in lifecycle.started  # no --metrics-address: no HTTP endpoint
        assert background.publisher.published.wait(WAIT)
        assert GPU in node.device_names()
        assert {h.device_name for h in core.monitor.health_snapshot()} >= {GPU}
    finally:
        lifecycle.stop()
    lifecycle.stop()
    assert lifecycle.started == ()
    assert not node.registration_socket.exists()
    assert not node.dra_socket.exists()


def test_a_fatal_background_error_reaches_on_fatal_a_recoverable_one_does_not(node: RunNode) -> None:
    """The claims driver's handle_error is what the kubelet server and the publisher call."""
    reasons: list[str] = []
    core = build(build_front(_config(node)), on_fatal=reasons.append)
    try:
        core.plugin.handle_error(RecoverableError(RuntimeError("apiserver away")), "slice publishing")
        assert reasons == []
        core.plugin.handle_error(RuntimeError("health stream broke"), "health fan-out")
        assert reasons == ["health fan-out: health stream broke"]
    finally:
        core.status.close()  # its worker runs from its construction; nothing else was started
    assert not node.registration_socket.exists()


def test_a_fatal_error_ends_serve_with_its_reason(node: RunNode, collector: None) -> None:
    """serve stops everything and raises DriverError (exit 1) with the reason."""
    serving = _Serving(_config(node))
    wait_for(node.registration_socket.exists, WAIT, "the registration socket")
    serving.shutdown.request("health fan-out: health stream broke")
    serving.join()
    assert isinstance(serving.error, DriverError)
    assert str(serving.error) == "health fan-out: health stream broke"
    assert not node.registration_socket.exists()
    assert not node.dra_socket.exists()


def test_start_up_reconcile_waits_for_the_other_process_lock(node: RunNode, collector: None) -> None:
    """During a rolling update the other process may be preparing: the start-up reconcile (which
    may re-create files) runs under the cross-process flock. The kubelet registers us meanwhile,
    and a prepare it sends waits for the reconcile: it is answered, correctly, once the other
    process lets go of the lock, not before."""
    ref = _put_claim(node, "during-the-other")
    node.plugin_dir.mkdir(parents=True, exist_ok=True)
    other = os.open(node.plugin_dir / SERIALIZE_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(other, fcntl.LOCK_EX)
    with ThreadPoolExecutor(1) as pool:
        try:
            serving = _Serving(_config(node))
            wait_for(lambda: _waits_for_flock(os.fstat(other).st_ino), WAIT, "the start to wait for the lock")
            wait_for(node.registration_socket.exists, WAIT, "the registration socket")
            node.kubelet.register(node.registration_socket)
            prepared = pool.submit(node.kubelet.prepare, node.dra_socket, [ref])
            assert wait([prepared], timeout=0.5).done == set(), "prepared before the reconcile"
            assert serving.running and serving.error is None
        finally:
            fcntl.flock(other, fcntl.LOCK_UN)
            os.close(other)
        entry = prepared.result(WAIT).claims[ref.uid]
    assert entry.error == ""
    assert GPU in {d.device_name for d in entry.devices}
    assert serving.sigterm() == 0


def test_the_background_starts_once_the_kubelet_registered_us(node: RunNode, collector: None) -> None:
    """Nothing talks to the apiserver before the registration (the kubelet's GetInfo and
    NotifyRegistrationStatus do not wait behind the background's imports), and the collector is
    off until the start is over; then it is on and the start-up heap is frozen."""
    serving = _Serving(_config(node, registration_wait=120))
    try:
        wait_for(node.registration_socket.exists, WAIT, "the registration socket")
        assert serving.still_serving_after(0.5)
        assert node.api.requests == [], "the background started before the registration"
        assert not gc.isenabled()
        node.kubelet.register(node.registration_socket)
        wait_for(lambda: GPU in node.device_names(), WAIT, "published slices")  # far below 120 s
        wait_for(gc.isenabled, WAIT, "the collector back on")
        assert gc.get_freeze_count() > 0
    finally:
        assert serving.sigterm() == 0


def test_without_a_kubelet_the_background_starts_after_the_wait(node: RunNode, collector: None) -> None:
    """No kubelet registers (it is down, or slow): after registration_wait the rest starts anyway."""
    serving = _Serving(_config(node, registration_wait=0.2))
    try:
        wait_for(lambda: GPU in node.device_names(), WAIT, "published slices without a registration")
    finally:
        assert serving.sigterm() == 0


def test_sigterm_while_waiting_for_the_registration_skips_the_background(
    node: RunNode, collector: None
) -> None:
    """SIGTERM during the wait: serve returns 0 without starting the background; no socket is left."""
    serving = _Serving(_config(node, registration_wait=120))
    wait_for(node.registration_socket.exists, WAIT, "the registration socket")
    assert serving.sigterm() == 0
    assert node.api.requests == []
    assert not node.registration_socket.exists()
    assert not node.dra_socket.exists()


def test_sighup_during_the_start_is_kept_for_the_housekeeping_thread(node: RunNode, collector: None) -> None:
    """A SIGHUP noted before the housekeeping thread runs is not lost: the first round rescans,
    and a host that changed meanwhile is republished."""
    serving = _Serving(_config(node, registration_wait=120))
    try:
        wait_for(node.registration_socket.exists, WAIT, "the registration socket")
        (node.host / "sys" / "bus" / "pci" / "devices" / "0000:00:02.0").unlink()
        serving.signals.note(signal.SIGHUP)
        node.kubelet.register(node.registration_socket)
        wait_for(lambda: GPU in node.device_names(), WAIT, "published slices")
        wait_for(lambda: "gpu-0000-00-02-0" not in node.device_names(), WAIT, "the GPU gone")
    finally:
        assert serving.sigterm() == 0
