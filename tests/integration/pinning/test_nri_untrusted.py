"""What others wrote, over the real NRI socket: a hostile marker env and a planted pinner lock.

Case 1 of issue 20: a pod with no claim set ``NUMADRA_CPUS=0-9999999``; the plugin expanded it
before any check (1.1 GiB, 3.3 s with the GIL held, past the 1 s time box, so the runtime got "no
adjustment" while the thread kept eating memory). Case 7: a symbolic link planted at
``<plugin-dir>/nri-pinner.lock`` made the plugin a silent follower, so claim containers ran
unpinned with only a log line. The fake runtime plays containerd (``fake_nri_runtime.py``).
"""

from __future__ import annotations

import shutil
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from driver.pinning.nri import NriPlugin
from driver.pinning.types import ClaimBinding, ClaimPinning, CpuAssignment, CpuMode, marker_env
from harness.fake_nri_runtime import (
    POD,
    FakeNriRuntime,
    FakePluginConnection,
    connect_plugin,
    container,
    pod,
)
from tests.support.planted import plant

pytestmark = pytest.mark.fault

EVIL = pod("pod-evil", "pod-uid-evil", name="evil")
PIN_A = ClaimPinning(
    "claim-a", (CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({2, 3}), frozenset({0})),)
)
BINDINGS = {"claim-a": ClaimBinding("claim-a", "default", "cpus-a", frozenset({POD.uid}), PIN_A)}
CLAIM_ENV = [f"{k}={v}" for k, v in marker_env(PIN_A.assignments[0], "claim-a").items()]

Start = Callable[..., tuple[NriPlugin, FakePluginConnection]]


@pytest.fixture
def runtime() -> Iterator[FakeNriRuntime]:
    d = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    rt = FakeNriRuntime(d / "nri.sock")
    yield rt
    rt.close()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def start(runtime: FakeNriRuntime) -> Iterator[Start]:
    plugins: list[NriPlugin] = []

    def _start(**kwargs: object) -> tuple[NriPlugin, FakePluginConnection]:
        kwargs.setdefault("claim_lookup", BINDINGS.get)
        plugin = NriPlugin(socket_path=runtime.socket_path, **kwargs)  # type: ignore[arg-type]
        plugins.append(plugin)
        conn = connect_plugin(runtime, plugin.connect)
        conn.configure()
        conn.synchronize([], pods=[POD, EVIL])
        return plugin, conn

    yield _start
    for plugin in plugins:
        plugin.close()


@pytest.mark.parametrize("cpus", ["0-9999999", "0-8191," * 5000, "0-" + "9" * 5000])
def test_a_hostile_marker_of_a_claimless_pod_is_refused_cheaply(start: Start, cpus: str) -> None:
    _, conn = start()
    tracemalloc.start()
    try:
        answer = conn.create_container_raw(
            container("c-evil", "x", [f"NUMADRA_CPUS={cpus}"], sandbox=EVIL.id), pod=EVIL
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer.status.code == 9 and "NUMADRA_CPUS" in answer.status.message  # refused, by name
    assert peak < 16 << 20  # main peaked above a GiB expanding the range
    rightful = conn.create_container(container("c-app", "app", CLAIM_ENV))  # the plugin still serves
    assert rightful.adjust.linux.resources.cpu.cpus == "2-3"


@pytest.mark.parametrize("kind", ["link-to-file", "link-to-dev-zero", "fifo", "directory", "socket"])
def test_a_planted_pinner_lock_refuses_claim_containers_loudly(
    start: Start, runtime: FakeNriRuntime, kind: str
) -> None:
    """Neither pinner nor follower can be told apart without the lock, so a container that needs
    pinning is refused (CreateContainerError, the kubelet retries) with the path in the message,
    never created unpinned; one that needs nothing is created; once the lock file is sound again
    the next container is pinned."""
    lock = runtime.socket_path.parent / "nri-pinner.lock"
    if kind == "link-to-file":
        (lock.parent / "attacker-owned").write_text("")
        lock.symlink_to(lock.parent / "attacker-owned")
    else:
        plant(kind, lock)
    plugin, conn = start(leader_lock=lock, takeover_wait_s=0.05)

    refused = conn.create_container_raw(container("c-1", "app", CLAIM_ENV))
    assert refused.status.code == 9, refused
    assert str(lock) in refused.status.message and "unpinned" in refused.status.message
    assert not plugin.is_pinner

    plain = conn.create_container(container("c-plain", "sidecar"))  # nothing to pin: no refusal
    assert not plain.HasField("adjust") or not plain.adjust.linux.resources.cpu.cpus

    if lock.is_dir() and not lock.is_symlink():
        lock.rmdir()
    else:
        lock.unlink()
    pinned = conn.create_container(container("c-2", "app", CLAIM_ENV))
    assert pinned.adjust.linux.resources.cpu.cpus == "2-3" and plugin.is_pinner
