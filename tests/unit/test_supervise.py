"""The thread supervisor (``driver.supervise``): no loop of numadra dies silently.

The mechanics on a plain target: an exception that escapes is logged with its traceback and the
loop's name, counted, and the target runs again after a backoff step; a core loop that keeps
failing is named by the registry (``/readyz``) until it runs a healthy while; joining ends the
restarts; a target that cannot be run again ends its thread, logged and counted all the same.

And the rule that makes it the only way: an AST scan of ``driver/`` finds no ``threading.Thread``
outside the supervisor, proven able to fail on planted source. Every loop it starts is thrown an
exception in ``tests/integration/test_every_loop_recovers.py``.
"""

from __future__ import annotations

import ast
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from driver.backoff import RetryPolicy
from driver.observability import Metrics, MetricsServer
from driver.supervise import FAILING_AFTER, LOOPS, LoopRegistry, supervised, survived
from harness.poll import wait_for

REPO = Path(__file__).resolve().parents[2]
SUPERVISOR = "driver/supervise.py"
#: restarts in a blink, and a "healthy while" a test can wait out
FAST = RetryPolicy(floor=0.01, cap=0.05, healthy_after=2.0)


class InjectedError(RuntimeError):
    """The injected failure: no loop expects it."""


def _failing_times(times: int, ran: threading.Event, calls: list[int]) -> object:
    def target() -> None:
        calls.append(len(calls))
        if len(calls) <= times:
            raise InjectedError(f"injected #{len(calls)}")
        ran.set()

    return target


def test_an_escaped_exception_is_logged_counted_and_the_loop_runs_again() -> None:
    registry, ran, calls = LoopRegistry(), threading.Event(), []
    thread = supervised("t-restart", _failing_times(2, ran, calls), policy=FAST, registry=registry)
    with capture_logs() as logs:
        thread.start()
        assert ran.wait(10)
        thread.join(10)
    assert calls == [0, 1, 2] and not thread.is_alive()
    assert registry.restarts() == {"t-restart": 2}
    failed = [e for e in logs if e["event"] == "background loop failed"]
    assert [e["loop"] for e in failed] == ["t-restart", "t-restart"]
    assert all(e["exc_info"] is True and e["error_type"] == "InjectedError" for e in failed)
    assert [e["failures_in_a_row"] for e in failed] == [1, 2]


def test_a_core_loop_that_keeps_failing_is_named_until_it_runs_a_healthy_while() -> None:
    registry, ran, calls = LoopRegistry(), threading.Event(), []
    release = threading.Event()

    def target() -> None:
        calls.append(1)
        if len(calls) <= FAILING_AFTER:
            raise InjectedError("again")
        ran.set()
        release.wait(10)  # a healthy run: it keeps running

    thread = supervised("t-core", target, core=True, policy=FAST, registry=registry)
    other = supervised("t-plain", _failing_times(FAILING_AFTER + 1, threading.Event(), []), policy=FAST)
    thread.start()
    other.start()
    assert ran.wait(10)
    assert registry.failing() == ["t-core"]  # running again, but not yet for healthy_after
    assert [s.name for s in registry.states() if s.failing] == ["t-core"]
    wait_for(lambda: registry.failing() == [], 10, "a healthy while")  # healthy_after: ready again
    release.set()
    thread.join(10)
    other.join(10)
    assert "t-plain" not in LOOPS.failing()  # not core: counted, never named


def test_join_ends_the_wait_for_a_restart() -> None:
    slow = RetryPolicy(floor=30.0, cap=30.0)
    started = threading.Event()

    def target() -> None:
        started.set()
        raise InjectedError("then a 30 s wait")

    thread = supervised("t-join", target, policy=slow, registry=LoopRegistry())
    thread.start()
    assert started.wait(10)
    thread.join(10)  # well before the 30 s step: the wait ended on the join
    assert not thread.is_alive()


def test_a_target_that_cannot_run_again_ends_its_thread_logged_and_counted() -> None:
    registry, calls = LoopRegistry(), []
    thread = supervised(
        "t-once", _failing_times(5, threading.Event(), calls), restart=False, policy=FAST, registry=registry
    )
    with capture_logs() as logs:
        thread.start()
        thread.join(10)
    assert calls == [0] and registry.restarts() == {"t-once": 1}
    (failed,) = [e for e in logs if e["event"] == "background loop failed"]
    assert failed["restart_in"] is None and failed["exc_info"] is True


def test_a_target_that_returns_is_not_restarted() -> None:
    registry, calls = LoopRegistry(), []
    thread = supervised("t-done", lambda: calls.append(1), policy=FAST, registry=registry)
    thread.start()
    thread.join(10)
    assert calls == [1] and registry.restarts() == {"t-done": 0}


def test_an_exception_a_loop_caught_itself_is_logged_and_counted_the_same_way() -> None:
    before = LOOPS.restarts().get("t-survived", 0)
    with capture_logs() as logs:
        try:
            raise InjectedError("one bad item")
        except InjectedError as exc:
            survived("t-survived", exc, event="item failed", item=7)
    assert LOOPS.restarts()["t-survived"] == before + 1
    (line,) = logs
    assert (line["event"], line["loop"], line["item"], line["exc_info"]) == (
        "item failed",
        "t-survived",
        7,
        True,
    )


# -- the only way to start a thread ---------------------------------------------------------------


def _thread_starts(source: str) -> list[int]:
    """Lines that make a thread by hand: ``threading.Thread(``, a bare ``Thread(``, a subclass."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr in ("Thread", "Timer")) or (
                isinstance(func, ast.Name) and func.id in ("Thread", "Timer")
            ):
                lines.append(node.lineno)
        elif isinstance(node, ast.ClassDef) and any(
            ast.unparse(base) in ("threading.Thread", "Thread") for base in node.bases
        ):
            lines.append(node.lineno)
    return lines


def test_no_thread_is_started_outside_the_supervisor() -> None:
    found = []
    for path in sorted((REPO / "driver").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel != SUPERVISOR and not rel.startswith("driver/_proto/"):
            found += [f"{rel}:{line}" for line in _thread_starts(path.read_text(encoding="utf-8"))]
    assert found == [], "start it with driver.supervise.supervised(...)"
    assert _thread_starts((REPO / SUPERVISOR).read_text(encoding="utf-8"))  # the one place


@pytest.mark.parametrize(
    "planted",
    [
        "import threading\nthreading.Thread(target=print, daemon=True).start()\n",
        "from threading import Thread\nThread(target=print).start()\n",
        "import threading\nthreading.Timer(1.0, print).start()\n",
        "import threading\nclass Mine(threading.Thread):\n    pass\n",
    ],
)
def test_the_scan_finds_a_planted_thread(planted: str) -> None:
    assert _thread_starts(planted)


# -- what operators see: the metric and /readyz ---------------------------------------------------


def test_restarts_reach_the_metric_by_loop() -> None:
    metrics = Metrics()
    metrics.set_loop_restarts({"slice-watch": 0, "claim-status": 2})
    metrics.set_loop_restarts({"slice-watch": 1, "claim-status": 2})  # running totals: no double count
    assert metrics.sample("numadra_loop_restarts_total", {"loop": "slice-watch"}) == 1.0
    assert metrics.sample("numadra_loop_restarts_total", {"loop": "claim-status"}) == 2.0


def test_readyz_names_a_core_loop_that_keeps_failing() -> None:
    registry, release = LoopRegistry(), threading.Event()
    calls: list[int] = []

    def target() -> None:
        calls.append(1)
        if len(calls) <= FAILING_AFTER:
            raise InjectedError("again")
        release.wait(10)

    thread = supervised("slice-publisher", target, core=True, policy=FAST, registry=registry)
    server = MetricsServer("127.0.0.1:0", failing_loops=registry.failing)
    server.start()
    try:
        host, port = server.address
        assert _readyz(host, port) == (200, "ok\n")
        thread.start()
        wait_for(lambda: len(calls) > FAILING_AFTER, 10, "the fourth run")
        assert _readyz(host, port) == (503, "not ready: loop slice-publisher keeps failing\n")
        release.set()
        thread.join(10)
        assert _readyz(host, port) == (200, "ok\n")  # its owner stopped it: not failing
    finally:
        release.set()
        server.stop()


def _readyz(host: str, port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/readyz", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
