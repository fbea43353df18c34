"""Every background loop of numadra, thrown an exception it does not expect, goes on.

The loops are found in the code, not listed by hand: an AST walk of ``driver/`` collects every
loop name given to :func:`driver.supervise.supervised` (the only way to start a thread, which
``tests/unit/test_supervise.py`` enforces) and to :func:`driver.supervise.survived` (a loop that
catches at its iteration's edge). :data:`CASES` must hold a case for exactly those names, so a new
loop fails here until it is given one.

Each case builds the loop's real owner with one collaborator that raises :class:`InjectedError`
once, where the loop does not catch it, and then proves three things: the loop ran its next
iteration (the owner's own work happened after the failure), the failure was counted under the
loop's name (``numadra_loop_restarts_total{loop}`` reads these totals), and it was logged with
its traceback and the loop's name. Two loops own something they close on the way out (an event
loop, one runtime connection) and are not restarted: for them the owner's own recovery is the
next iteration (the NRI plugin reconnects; the metrics server's start fails loudly).
"""

from __future__ import annotations

import ast
import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import driver.pinning.nri.plugin as nri_plugin_module
from driver.claims.adopted import AdoptedClaims
from driver.claims.housekeeping import Housekeeping
from driver.claims.statusqueue import AsyncStatusWriter
from driver.errors import DriverError
from driver.health.monitor import HealthMonitor
from driver.inventory.watch import Debouncer
from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient
from driver.kubelet.health import HealthFanout
from driver.observability.server import MetricsServer
from driver.pinning.factory import NriService
from driver.pinning.nri.plugin import NriPlugin
from driver.pinning.nri.wire import Demuxer
from driver.slices.builder import build_slices
from driver.slices.foreign import ForeignOwners
from driver.slices.publisher import SlicePublisher
from driver.supervise import LOOPS
from driver.worker import QueueWorker
from harness.fake_nri_runtime import FakeNriRuntime
from harness.fakeapiserver import FakeApiServer
from harness.poll import wait_for
from tests.integration.publisher.inventories import gpu_inventory

REPO = Path(__file__).resolve().parents[2]
WAIT = 15.0
NODE, DRIVER = "node-a", "numadra.dev"


class InjectedError(RuntimeError):
    """The failure thrown into a loop: no loop expects it."""


class Once:
    """Raises InjectedError on its first call (from a thread named ``on_thread`` when given), then counts."""

    def __init__(self, then: Callable[..., Any] = lambda *a, **k: None, on_thread: str = "") -> None:
        self.calls = 0
        self.raised = False
        self._then = then
        self._on_thread = on_thread
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.calls += 1
            fire = not self.raised and (
                not self._on_thread or threading.current_thread().name == self._on_thread
            )
            self.raised = self.raised or fire
        if fire:
            raise InjectedError("thrown into the loop")
        return self._then(*args, **kwargs)


# -- the loops, from the code -----------------------------------------------------------------------


def _loop_names() -> set[str]:
    """The loop names given to ``supervised(...)`` and ``survived(...)`` in ``driver/``: a string
    literal as it is, anything else as ``file:expression`` (a queue worker's ``self.name``)."""
    names = set()
    for path in sorted((REPO / "driver").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel == "driver/supervise.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("supervised", "survived")
                and node.args
            ):
                arg = node.args[0]
                is_text = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                names.add(arg.value if is_text else f"{rel}:{ast.unparse(arg)}")
    return names


# -- one case per loop: build the owner with a fault, return (probe, stop) ----------------------------

Case = Callable[[pytest.MonkeyPatch, Path], tuple[Callable[[], bool], Callable[[], None]]]


class _FaultyApi:
    """The real client against the fake apiserver, one call of which raises InjectedError once."""

    def __init__(self, client: KubeClient, method: str) -> None:
        self._client = client
        self.fault = Once(getattr(client, method))
        setattr(self, method, self.fault)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@contextlib.contextmanager
def _apiserver() -> Iterator[KubeClient]:
    api = FakeApiServer()
    api.start()
    api.put_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    client = KubeClient(api.kubeconfig_path, timeout=2.0, connect_timeout=0.5)
    try:
        yield client
    finally:
        client.close()
        api.close()


def _publisher_case(method: str) -> Case:
    def case(_mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
        stack = contextlib.ExitStack()
        faulty = _FaultyApi(stack.enter_context(_apiserver()), method)
        pub = SlicePublisher(
            faulty, node_name=NODE, driver_name=DRIVER, retry=RetryPolicy(floor=0.05, cap=0.2)
        )
        pub.publish(build_slices(gpu_inventory(1), node_name=NODE, driver_name=DRIVER))
        pub.start()
        stack.callback(pub.stop)
        return (
            lambda: faulty.fault.raised and faulty.fault.calls >= 2 and pub.published.is_set()
        ), stack.close

    return case


def _foreign_case(method: str) -> Case:
    """The owners watcher of other drivers' slices and the Node, one call of which fails once."""

    def case(_mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
        stack = contextlib.ExitStack()
        faulty = _FaultyApi(stack.enter_context(_apiserver()), method)
        owners = ForeignOwners(
            faulty,
            inventory=lambda: gpu_inventory(1),
            node_name=NODE,
            driver_name=DRIVER,
            retry=RetryPolicy(floor=0.05, cap=0.2),
            node_interval=0.05,
            watch_timeout=1,
        )
        owners.start()
        stack.callback(owners.stop)
        return (lambda: faulty.fault.raised and faulty.fault.calls >= 2), stack.close

    return case


def _worker(_mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
    handled: list[int] = []
    handler = Once(handled.append)
    worker: QueueWorker[int] = QueueWorker("loop-test-worker", handler, max_queued=4)
    for item in (1, 2):
        worker.put(item)
    return (lambda: handled == [2]), lambda: worker.close(5)


def _housekeeping(_mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
    index = type("Index", (), {"stale": False})()
    rescan = Once()
    house = Housekeeping(index=index, rescan=rescan, rescan_interval=0.05, settle=0.01)  # type: ignore[arg-type]
    house.start()
    return (lambda: rescan.calls >= 2), house.stop


def _adopted(_mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
    claims = type("Claims", (), {})()
    claims.prepared_claims = Once(lambda: [])
    adopted = AdoptedClaims(claims, object(), hold=contextlib.nullcontext, interval_s=0.05)  # type: ignore[arg-type]
    adopted.start()
    return (lambda: claims.prepared_claims.calls >= 2), adopted.stop


def _claim_status(_mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
    cleared: list[str] = []
    writer = type("Writer", (), {})()
    writer.clear = Once(lambda namespace, name, uid="": cleared.append(name))
    status = AsyncStatusWriter(lambda: writer)
    status.clear("ns", "first", "uid-1")
    status.clear("ns", "second", "uid-2")
    return (lambda: cleared == ["second"]), status.close


def _debounce(_mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
    callback = Once()
    debouncer = Debouncer(callback, window_s=0.01)
    debouncer.trigger()
    wait_for(lambda: callback.raised, WAIT, "the first callback")
    debouncer.trigger()
    return (lambda: callback.calls >= 2), debouncer.close


def _health_monitor(_mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
    from driver.health.signals import HEALTHY

    reader = type("Reader", (), {})()
    reader.read = Once(lambda device: HEALTHY, on_thread="health-monitor")
    monitor = HealthMonitor(gpu_inventory(1), pool_name=NODE, interval=0.05, reader=reader)  # type: ignore[arg-type]
    monitor.start()
    return (lambda: reader.read.raised and reader.read.calls >= 3), monitor.stop


def _health_fanout(_mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
    def hiccup(timeout: float) -> bool:
        raise OSError("udev hiccup")  # the fanout catches this and hands it to on_error

    source = type("Source", (), {"wait_for_change": staticmethod(hiccup)})()
    on_error = Once()  # the plugin's handle_error, failing itself: past the fanout's own catch
    fanout = HealthFanout(source, on_error, DRIVER, poll=0.02)
    fanout.start()
    return (lambda: on_error.raised and on_error.calls >= 2), fanout.stop


def _nri_plugin(_mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
    plugin = type("Plugin", (), {"close": lambda self: None})()
    plugin.serve_forever = Once(lambda stop: stop.wait(WAIT))
    service = NriService(plugin)
    service.start()
    return (lambda: plugin.serve_forever.calls >= 2), service.stop


def _nri_reader(mp: pytest.MonkeyPatch, tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
    broken = Once(lambda data: [])

    class FirstDemuxerBreaks(Demuxer):
        made = 0

        def feed(self, data: bytes) -> Any:
            if FirstDemuxerBreaks.made == 1:
                return broken(data) or super().feed(data)
            return super().feed(data)

        def __init__(self) -> None:
            super().__init__()
            FirstDemuxerBreaks.made += 1

    mp.setattr(nri_plugin_module, "Demuxer", FirstDemuxerBreaks)
    runtime = FakeNriRuntime(tmp / "nri.sock")
    plugin = NriPlugin(claim_lookup=lambda uid: None, socket_path=runtime.socket_path)
    service = NriService(plugin)
    service.start()
    accepted: list[object] = []
    acceptor = threading.Thread(target=lambda: accepted.extend(runtime.accept(WAIT) for _ in range(2)))
    acceptor.start()

    def stop() -> None:
        service.stop()
        acceptor.join(WAIT)
        runtime.close()

    # the second connection registered: the plugin reconnected after its reader died
    return (lambda: broken.raised and len(accepted) == 2), stop


def _metrics_http(mp: pytest.MonkeyPatch, _tmp: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
    import driver.observability.server as server_module

    mp.setattr(server_module.asyncio, "start_server", Once())
    server = MetricsServer("127.0.0.1:0")
    with pytest.raises(DriverError, match="did not start"):
        server.start()  # the loop's failure reaches the owner: the process does not start blind
    return (lambda: True), server.stop


CASES: dict[str, Case] = {
    "slice-publisher": _publisher_case("get_node"),
    "slice-watch": _publisher_case("watch_resource_slices"),
    "foreign-slices": _foreign_case("list_resource_slices"),
    "foreign-node": _foreign_case("get_node"),
    "driver/worker.py:self.name": _worker,
    "app-housekeeping": _housekeeping,
    "adopted-claims": _adopted,
    "claim-status": _claim_status,
    "numadra-debounce": _debounce,
    "health-monitor": _health_monitor,
    "health-fanout": _health_fanout,
    "nri-plugin": _nri_plugin,
    "nri-reader": _nri_reader,
    "metrics-http": _metrics_http,
}
#: the name a case's failures are counted and logged under, where the code's name is an expression
COUNTED_AS = {"driver/worker.py:self.name": "loop-test-worker"}


def test_every_loop_in_the_code_has_a_case() -> None:
    assert _loop_names() == set(CASES)


@pytest.mark.parametrize("loop", sorted(CASES))
def test_a_loop_thrown_an_exception_goes_on_counted_and_logged(
    loop: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = COUNTED_AS.get(loop, loop)
    before = LOOPS.restarts().get(name, 0)
    with capture_logs() as logs:
        recovered, stop = CASES[loop](monkeypatch, tmp_path)
        try:
            wait_for(recovered, WAIT, f"{loop} to run its next iteration")
            wait_for(lambda: LOOPS.restarts().get(name, 0) > before, WAIT, f"{loop}'s failure to be counted")
        finally:
            stop()
    logged = [e for e in logs if e.get("loop") == name and e.get("error_type") == "InjectedError"]
    assert logged, f"no log line names {name} with the injected error"
    assert all(e["exc_info"] is True and e["log_level"] == "error" for e in logged)
