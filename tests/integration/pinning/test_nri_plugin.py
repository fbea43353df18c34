"""The NRI plugin against a fake runtime over a real unix socket: handshake, adjustments, restarts."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver._proto.nri import api_pb2 as nri
from driver.pinning.backend import PinTarget
from driver.pinning.failures import PinFailure
from driver.pinning.nri import NriPlugin, PinningHandlers
from driver.pinning.types import ClaimBinding, ClaimPinning, CpuAssignment, CpuMode
from harness.fake_nri_runtime import (
    FakeNriRuntime,
    FakePluginConnection,
    container,
)

OURS_ENV = [
    "PATH=/usr/bin",
    "NUMADRA_CPUS=2-3",
    "NUMADRA_MEMS=0",
    "NUMADRA_CPU_MODE=exclusive",
    "NUMADRA_CLAIM_UID=claim-a",
    "NUMADRA_REQUEST=main",
]
CLAIM_A = ClaimPinning(
    "claim-a", (CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({2, 3}), frozenset({0})),)
)
#: claim-a as the journal records it: reserved for the fake runtime's default pod
BINDING_A = ClaimBinding("claim-a", "default", "cpus-a", frozenset({"pod-uid-1"}), CLAIM_A)
LOOKUP = {"claim-a": BINDING_A}.get


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for the socket (unix socket paths are limited to 108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def runtime(sock_dir: Path) -> Iterator[FakeNriRuntime]:
    """The fake runtime listening on <dir>/nri.sock."""
    rt = FakeNriRuntime(sock_dir / "nri.sock")
    yield rt
    rt.close()


def _start(runtime: FakeNriRuntime, plugin: NriPlugin) -> FakePluginConnection:
    """Connect the plugin (registration blocks until the runtime answers) and accept it."""
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            plugin.connect()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=connect)
    t.start()
    conn = runtime.accept()
    t.join(5)
    assert not errors, errors
    return conn


@pytest.fixture
def plugin(runtime: FakeNriRuntime) -> Iterator[NriPlugin]:
    """A plugin (claim-a prepared for the default pod) aimed at the fake runtime's socket."""
    p = NriPlugin(claim_lookup=LOOKUP, socket_path=runtime.socket_path)
    yield p
    p.close()


def test_handshake_registers_and_subscribes(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
    """RegisterPlugin carries name and index; Configure subscribes to create/update/stop/remove."""
    conn = _start(runtime, plugin)
    reg = conn.registered.result(1)
    assert (reg.plugin_name, reg.plugin_idx) == ("numadra", "00")
    assert conn.runtime_requests == ["nri.pkg.api.v1alpha1.Runtime/RegisterPlugin"]
    events = conn.configure().events
    assert events == (1 << 3) | (1 << 7) | (1 << 9) | (1 << 10)


def test_create_container_adjusts_only_ours(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
    """Our marker env yields cpus/mems in the adjustment; another container gets none."""
    conn = _start(runtime, plugin)
    conn.configure()
    conn.synchronize([])
    ours = conn.create_container(container("c-ours", "app", OURS_ENV))
    assert ours.adjust.linux.resources.cpu.cpus == "2-3"
    assert ours.adjust.linux.resources.cpu.mems == "0"
    other = conn.create_container(container("c-other", "web", ["PATH=/usr/bin"]))
    assert not other.HasField("adjust")
    assert not other.update
    assert set(plugin.handlers.containers()) == {"c-ours"}


def test_synchronize_after_plugin_restart_rebuilds_and_repins(
    runtime: FakeNriRuntime, sock_dir: Path
) -> None:
    """A fresh plugin learns running containers from Synchronize and re-pins the drifted one."""
    first = NriPlugin(claim_lookup=LOOKUP, socket_path=runtime.socket_path)
    conn = _start(runtime, first)
    conn.configure()
    conn.synchronize([])
    conn.create_container(container("c1", "app", OURS_ENV))
    first.close()  # plugin restart: the process and its memory are gone
    assert conn.closed.wait(5)

    second = NriPlugin(claim_lookup=LOOKUP, socket_path=runtime.socket_path)
    try:
        conn2 = _start(runtime, second)
        conn2.configure()
        running = [
            container("c1", "app", OURS_ENV, cpus="2-3", mems="0"),  # still pinned
            container("c2", "app2", OURS_ENV, cpus="0-7"),  # drifted
            container("c3", "web", ["PATH=/usr/bin"], cpus="0-7"),  # not ours
        ]
        first_page = conn2.synchronize(running[:1], more=True)
        assert first_page.more and not first_page.update
        resp = conn2.synchronize(running[1:], pods=[])  # the pod came with the first page
        assert [u.container_id for u in resp.update] == ["c2"]
        assert resp.update[0].linux.resources.cpu.cpus == "2-3"
        assert resp.update[0].linux.resources.cpu.mems == "0"
        assert set(second.handlers.containers()) == {"c1", "c2"}
    finally:
        second.close()


def test_slow_handler_answers_within_one_second(runtime: FakeNriRuntime) -> None:
    """A handler stuck (slow claim lookup) is abandoned after 1 s; the claim container it was
    deciding is refused (never created on CPUs it was not given), and the refusal reported."""
    release = threading.Event()
    returned = threading.Event()

    def slow_lookup(uid: str) -> ClaimBinding | None:
        release.wait(10)
        returned.set()
        return BINDING_A

    failures: list[PinFailure] = []
    plugin = NriPlugin(claim_lookup=slow_lookup, socket_path=runtime.socket_path, on_failure=failures.append)
    try:
        conn = _start(runtime, plugin)
        conn.configure()
        started = time.monotonic()
        resp = conn.create_container_raw(container("c-slow", "app", OURS_ENV))
        took = time.monotonic() - started
        assert not returned.is_set(), "answered while the handler was still stuck"
        assert took >= 0.9  # it did wait for the handler, up to the time box
        assert resp.status.code == 9 and "not decided within the NRI time box of 1 s" in resp.status.message
        assert [(f.reason, f.action) for f in failures] == [("timeout", "refused")]
    finally:
        release.set()
        plugin.close()


def test_slow_handler_of_a_container_without_a_claim_answers_empty(runtime: FakeNriRuntime) -> None:
    """A container that carries no marker and whose answer is late gets no adjustment, not a refusal."""
    release = threading.Event()
    plugin = NriPlugin(
        claim_lookup=LOOKUP,
        node_shared_pool=lambda: release.wait(10) and frozenset({0}),
        socket_path=runtime.socket_path,
    )
    try:
        conn = _start(runtime, plugin)
        conn.configure()
        resp = conn.create_container(container("c-web", "web"), timeout=5)
        assert not resp.HasField("adjust")
    finally:
        release.set()
        plugin.close()


@pytest.mark.parametrize(
    ("env", "lookup", "message"),
    [
        pytest.param(["NUMADRA_CPUS=3-1"], None, "malformed pinning marker", id="malformed"),
        pytest.param(["NUMADRA_CPUS="], None, "empty pinning marker", id="empty"),
        pytest.param(OURS_ENV, {}, "has not prepared", id="unknown-claim"),
        pytest.param(OURS_ENV, None, "no claim records", id="no-lookup"),
        pytest.param(["NUMADRA_CPUS=2-3"], {"claim-a": BINDING_A}, "names no claim", id="no-claim-uid"),
        pytest.param(
            [*OURS_ENV[:-1], "NUMADRA_REQUEST=other"],
            {"claim-a": BINDING_A},
            "no CPU assignment for request 'other'",
            id="unknown-request",
        ),
    ],
)
def test_bad_markers_fail_closed(
    runtime: FakeNriRuntime, env: list[str], lookup: dict[str, ClaimBinding] | None, message: str
) -> None:
    """A bad or untrusted marker makes the runtime refuse the container (error status)."""
    plugin = NriPlugin(claim_lookup=None if lookup is None else lookup.get, socket_path=runtime.socket_path)
    try:
        conn = _start(runtime, plugin)
        resp = conn.create_container_raw(container("c-bad", "app", env))
        assert resp.status.code == 9
        assert message in resp.status.message
    finally:
        plugin.close()


def test_cpus_come_from_the_record_not_the_env(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
    """The rightful pod's container gets the journal's CPUs and nodes whatever its env says."""
    conn = _start(runtime, plugin)
    env = [*OURS_ENV[:1], "NUMADRA_CPUS=0-7", "NUMADRA_MEMS=0-1", *OURS_ENV[3:]]
    resp = conn.create_container(container("c-ok", "app", env))
    assert resp.adjust.linux.resources.cpu.cpus == "2-3"
    assert resp.adjust.linux.resources.cpu.mems == "0"


def test_unknown_method_is_unimplemented(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
    """Methods the plugin does not serve get ttrpc status Unimplemented (12)."""
    conn = _start(runtime, plugin)
    resp = conn.call_raw("RunPodSandbox", nri.Empty())
    assert resp.status.code == 12
    resp = conn.call_raw("Configure", nri.Empty(), service="other.Service")
    assert resp.status.code == 12


def test_update_stop_remove_bookkeeping(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
    """UpdateContainer re-asserts our cpuset; Stop keeps the record, Remove drops it."""
    conn = _start(runtime, plugin)
    ctr = container("c1", "app", OURS_ENV)
    conn.create_container(ctr)
    widened = nri.LinuxResources(cpu=nri.LinuxCPU(cpus="0-7"))
    upd = conn.call(
        "UpdateContainer",
        nri.UpdateContainerRequest(container=ctr, linux_resources=widened),
        nri.UpdateContainerResponse,
    )
    assert [u.container_id for u in upd.update] == ["c1"]
    assert upd.update[0].linux.resources.cpu.cpus == "2-3"
    same = nri.LinuxResources(cpu=nri.LinuxCPU(cpus="2-3", mems="0"))
    upd = conn.call(
        "UpdateContainer",
        nri.UpdateContainerRequest(container=ctr, linux_resources=same),
        nri.UpdateContainerResponse,
    )
    assert not upd.update
    conn.call("StopContainer", nri.StopContainerRequest(container=ctr), nri.StopContainerResponse)
    assert plugin.handlers.containers()["c1"].stopped
    conn.call("RemoveContainer", nri.RemoveContainerRequest(container=ctr), nri.RemoveContainerResponse)
    assert plugin.handlers.containers() == {}


def test_backend_apply_pins_container_without_marker(runtime: FakeNriRuntime, plugin: NriPlugin) -> None:
    """apply() with a container id pins that container at creation even without env markers."""
    plugin.apply(
        PinTarget(container_id="c-x"),
        CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({1}), frozenset({0})),
    )
    conn = _start(runtime, plugin)
    resp = conn.create_container(container("c-x", "app"))
    assert resp.adjust.linux.resources.cpu.cpus == "1"
    plugin.release(PinTarget(container_id="c-x"))
    assert not conn.create_container(container("c-x", "app")).HasField("adjust")


def test_reconnects_after_runtime_restart(runtime: FakeNriRuntime) -> None:
    """serve_forever registers again when the runtime drops the connection, keeping handler state."""
    handlers = PinningHandlers(LOOKUP)
    plugin = NriPlugin(handlers, socket_path=runtime.socket_path)
    stop = threading.Event()
    t = threading.Thread(target=plugin.serve_forever, args=(stop,), daemon=True)
    t.start()
    try:
        conn = runtime.accept()
        conn.create_container(container("c1", "app", OURS_ENV))
        conn.close()  # the runtime restarts
        conn2 = runtime.accept(timeout=10)
        assert conn2.registered.result(1).plugin_name == "numadra"
        assert "c1" in handlers.containers()
        assert (
            conn2.create_container(container("c2", "app", OURS_ENV)).adjust.linux.resources.cpu.cpus == "2-3"
        )
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive()


def test_node_shared_pool_confines_other_containers(runtime: FakeNriRuntime) -> None:
    """With a node shared pool, other containers get it; a claim's arrival moves them off its CPUs."""
    pool = {"cpus": frozenset(range(8))}
    plugin = NriPlugin(
        claim_lookup=LOOKUP, node_shared_pool=lambda: pool["cpus"], socket_path=runtime.socket_path
    )
    try:
        conn = _start(runtime, plugin)
        web = conn.create_container(container("c-web", "web"))
        assert web.adjust.linux.resources.cpu.cpus == "0-7"
        assert web.adjust.linux.resources.cpu.mems == ""
        pool["cpus"] = frozenset({0, 1, 4, 5, 6, 7})  # claim-a prepared CPUs 2-3
        ours = conn.create_container(container("c-app", "app", OURS_ENV))
        assert ours.adjust.linux.resources.cpu.cpus == "2-3"
        assert [(u.container_id, u.linux.resources.cpu.cpus) for u in ours.update] == [("c-web", "0-1,4-7")]
        resp = conn.synchronize(
            [container("c-web", "web", cpus="0-7"), container("c-app", "app", OURS_ENV, cpus="2-3", mems="0")]
        )
        assert [(u.container_id, u.linux.resources.cpu.cpus) for u in resp.update] == [("c-web", "0-1,4-7")]
    finally:
        plugin.close()


def test_empty_node_shared_pool_refuses_other_containers(runtime: FakeNriRuntime) -> None:
    """An empty node pool fails a container without a claim instead of giving it every CPU."""
    plugin = NriPlugin(claim_lookup=LOOKUP, node_shared_pool=frozenset, socket_path=runtime.socket_path)
    try:
        conn = _start(runtime, plugin)
        resp = conn.create_container_raw(container("c-web", "web"))
        assert resp.status.code == 9
        assert "node shared pool is empty" in resp.status.message
        assert (
            conn.create_container(container("c-app", "app", OURS_ENV)).adjust.linux.resources.cpu.cpus
            == "2-3"
        )
    finally:
        plugin.close()


def test_time_box_follows_a_short_runtime_timeout(runtime: FakeNriRuntime) -> None:
    """A runtime request timeout below 1 s shrinks the time box so the plugin answers before it."""
    release = threading.Event()
    returned = threading.Event()

    def stuck_lookup(uid: str) -> ClaimBinding | None:
        release.wait(10)
        returned.set()
        return BINDING_A

    plugin = NriPlugin(claim_lookup=stuck_lookup, socket_path=runtime.socket_path)
    try:
        conn = _start(runtime, plugin)
        conn.configure(request_timeout_ms=500)
        resp = conn.create_container_raw(container("c-slow", "app", OURS_ENV))
        assert not returned.is_set(), "answered while the lookup was still stuck"
        assert resp.status.code == 9 and "time box of 0.4 s" in resp.status.message
    finally:
        release.set()
        plugin.close()


def test_concurrent_creates_are_multiplexed_by_stream(runtime: FakeNriRuntime) -> None:
    """Parallel CreateContainer calls on one socket each get their own container's adjustment."""
    claims = {
        f"claim-{i}": ClaimBinding(
            f"claim-{i}",
            "default",
            f"c{i}",
            frozenset({"pod-uid-1"}),
            ClaimPinning(
                f"claim-{i}", (CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({i}), frozenset({0})),)
            ),
        )
        for i in range(24)
    }
    plugin = NriPlugin(claim_lookup=claims.get, socket_path=runtime.socket_path)
    conn = _start(runtime, plugin)
    results: dict[int, str] = {}

    def create(i: int) -> None:
        env = [f"NUMADRA_CPUS={i}", "NUMADRA_MEMS=0", f"NUMADRA_CLAIM_UID=claim-{i}", "NUMADRA_REQUEST=main"]
        results[i] = conn.create_container(container(f"c{i}", "app", env)).adjust.linux.resources.cpu.cpus

    threads = [threading.Thread(target=create, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    plugin.close()
    assert results == {i: str(i) for i in range(24)}


def test_handler_bug_is_internal_error_and_connection_survives(runtime: FakeNriRuntime) -> None:
    """An unexpected handler exception answers Internal (13); the next call still works."""
    calls = {"n": 0}

    def flaky(uid: str) -> ClaimBinding | None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom")
        return BINDING_A

    plugin = NriPlugin(claim_lookup=flaky, socket_path=runtime.socket_path)
    try:
        conn = _start(runtime, plugin)
        resp = conn.create_container_raw(container("c1", "app", OURS_ENV))
        assert resp.status.code == 13 and "boom" in resp.status.message
        assert (
            conn.create_container(container("c2", "app", OURS_ENV)).adjust.linux.resources.cpu.cpus == "2-3"
        )
    finally:
        plugin.close()


def test_flood_of_stuck_handlers_still_answers_every_create_in_time(runtime: FakeNriRuntime) -> None:
    """More stuck requests than worker threads: each still gets its answer (a refusal) from its time
    box, before any stuck lookup returns."""
    release = threading.Event()
    returned = threading.Event()

    def stuck_lookup(uid: str) -> ClaimBinding | None:
        release.wait(10)
        returned.set()
        return BINDING_A

    plugin = NriPlugin(claim_lookup=stuck_lookup, socket_path=runtime.socket_path)
    in_time: dict[int, bool] = {}  # answered while every lookup was still stuck
    try:
        conn = _start(runtime, plugin)

        def create(i: int) -> None:
            resp = conn.create_container_raw(container(f"c{i}", "app", OURS_ENV))
            assert resp.status.code == 9
            in_time[i] = not returned.is_set()

        threads = [threading.Thread(target=create, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert in_time == dict.fromkeys(range(12), True)
    finally:
        release.set()
        plugin.close()


def test_preconnected_socket_fd(sock_dir: Path) -> None:
    """A runtime-started plugin uses the inherited socket fd (NRI_PLUGIN_SOCKET) instead of dialing."""
    import socket

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    plugin = NriPlugin(claim_lookup=LOOKUP, socket_path=sock_dir / "absent.sock", socket_fd=ours.detach())
    conn = FakePluginConnection(theirs)
    try:
        t = threading.Thread(target=plugin.connect)
        t.start()
        assert conn.registered.result(5).plugin_name == "numadra"
        t.join(5)
        assert (
            conn.create_container(container("c1", "app", OURS_ENV)).adjust.linux.resources.cpu.cpus == "2-3"
        )
    finally:
        plugin.close()
        conn.close()
