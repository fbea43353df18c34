"""ClaimCalls and HealthFanout without sockets: the cores the gRPC servicers delegate to."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import LogCapture

from driver.errors import KubeError
from driver.kube.types import JsonObject
from driver.kubelet.claims import ClaimFetcher
from driver.kubelet.dra import ClaimCalls, DriverCallError
from driver.kubelet.health import DEFAULT_RESEND_INTERVAL, HealthFanout
from driver.kubelet.serialize import SerializeLock
from driver.plugin import Claim, ClaimRef, HealthState, PrepareResult
from tests.support.fakeplugin import FakePlugin, StubClaims
from tests.support.within import within


@pytest.fixture
def lock(tmp_path: Path) -> Iterator[SerializeLock]:
    lk = SerializeLock(tmp_path / "serialize.lock")
    lk.open()
    yield lk
    lk.close()


def _calls(plugin: FakePlugin, lock: SerializeLock | None, known: Sequence[ClaimRef] = ()) -> ClaimCalls:
    """The calls core over a stand-in apiserver that holds ``known``."""
    return ClaimCalls(plugin, ClaimFetcher(StubClaims(known)), lock)


def test_prepare_answers_every_uid(lock: SerializeLock) -> None:
    """Good, failed, forgotten and malformed claims each get exactly one result."""
    fake = FakePlugin()
    claims = [
        ClaimRef("ns", "ok", "u1"),
        ClaimRef("ns", "fail-x", "u2"),
        ClaimRef("ns", "forget-x", "u3"),
        ClaimRef("ns", "Bad_Name", "u4"),
    ]
    results = _calls(fake, lock, claims).prepare(claims)
    assert sorted(results) == ["u1", "u2", "u3", "u4"]
    assert results["u1"].ok
    assert [r.ok for uid, r in sorted(results.items())] == [True, False, False, False]
    assert fake.calls == [("prepare", ("u1", "u2", "u3"))]


@contextlib.contextmanager
def _logs_at(level: int) -> Iterator[list[MutableMapping[str, Any]]]:
    """Capture the log lines of ``level`` and above; the earlier configuration comes back after."""
    saved = structlog.get_config()
    capture = LogCapture()
    structlog.configure(processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(level))
    try:
        yield capture.entries
    finally:
        structlog.configure(**saved)


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO])
def test_success_lines_per_claim_on_debug_only(lock: SerializeLock, level: int) -> None:
    """The per-claim success lines (the level is asked once per call) carry each claim's UID on
    debug and are not built at all above it; failures are warned about at any level."""
    claims = [ClaimRef("ns", "ok-a", "u1"), ClaimRef("ns", "ok-b", "u2"), ClaimRef("ns", "fail-c", "u3")]
    calls = _calls(FakePlugin(), lock, claims)
    with _logs_at(level) as logs:
        calls.prepare(claims)
        calls.unprepare(claims[:2])
    lines = [(e["event"], e["claim_uid"]) for e in logs if "claim_uid" in e]
    successes = [("claim prepared", "u1"), ("claim prepared", "u2")]
    successes += [("claim unprepared", "u1"), ("claim unprepared", "u2")]
    failure = ("claim prepare failed", "u3")
    assert sorted(lines) == sorted([*successes, failure] if level == logging.DEBUG else [failure])


def test_driver_exception_becomes_driver_call_error(lock: SerializeLock) -> None:
    """A raising driver surfaces as DriverCallError with type and text, and releases the lock."""
    calls = _calls(FakePlugin(), lock)
    with pytest.raises(DriverCallError, match="RuntimeError: fake driver exploded"):
        calls.unprepare([ClaimRef("ns", "raise-x", "u1")])
    assert calls.unprepare([ClaimRef("ns", "ok", "u1")]) == {"u1": ""}


class _Claims:
    """Claim objects as the apiserver would answer them, by namespace/name; counts the reads."""

    def __init__(self, objs: Sequence[JsonObject]) -> None:
        self.objs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}
        self.reads = 0

    def get_resource_claim(self, namespace: str, name: str, *, deadline: float | None = None) -> JsonObject:
        self.reads += 1
        try:
            return self.objs[(namespace, name)]
        except KeyError:
            raise KubeError(f"get resourceclaims/{namespace}/{name}: HTTP 404", status=404) from None


def _obj(name: str, uid: str, *, allocated: bool = True) -> JsonObject:
    status: dict[str, object] = {"allocation": {"devices": {"results": []}}} if allocated else {}
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid}, "status": status}


def test_claims_failing_the_claim_checks_never_reach_the_driver(lock: SerializeLock) -> None:
    """Replaced, unallocated and missing claims get their own error; the driver sees the good one,
    as a fetched claim (the object read, not only the reference)."""
    fake = FakePlugin()
    source = _Claims([_obj("ok", "u1"), _obj("ok-re", "new-uid"), _obj("ok-unalloc", "u3", allocated=False)])
    refs = [
        ClaimRef("ns", "ok", "u1"),
        ClaimRef("ns", "ok-re", "u2"),
        ClaimRef("ns", "ok-unalloc", "u3"),
        ClaimRef("ns", "ok-gone", "u4"),
    ]
    seen: list[Claim] = []
    original = fake.prepare_claims

    def prepare_claims(claims: Sequence[Claim]) -> Mapping[str, PrepareResult]:
        seen.extend(claims)
        return original(claims)

    fake.prepare_claims = prepare_claims  # type: ignore[method-assign,assignment]
    results = ClaimCalls(fake, ClaimFetcher(source), lock).prepare(refs)
    assert results["u1"].ok
    assert (
        results["u2"].error
        == "claim ns/ok-re (uid u2): got replaced: the apiserver's claim has UID 'new-uid'"
    )
    assert results["u3"].error == "claim ns/ok-unalloc (uid u3): not allocated (status.allocation is missing)"
    assert "claim ns/ok-gone (uid u4): ResourceClaim not found" in results["u4"].error
    assert fake.calls == [("prepare", ("u1",))]
    assert seen == [Claim(refs[0], source.objs[("ns", "ok")])]


def test_claims_refused_before_the_driver_are_counted_as_failed_prepares(lock: SerializeLock) -> None:
    """The metrics hear of refused claims (an apiserver that cannot serve them must show as prepare
    errors); the driver's own results are metered by MeteredPlugin, not here."""
    from driver.observability.metered import MeteredPlugin
    from driver.observability.metrics import Metrics

    source = _Claims([_obj("ok", "u1"), _obj("ok-unalloc", "u3", allocated=False)])
    refs = [ClaimRef("ns", "ok", "u1"), ClaimRef("ns", "ok-unalloc", "u3"), ClaimRef("ns", "ok-gone", "u4")]
    metered = MeteredPlugin(FakePlugin(), on_change=lambda: None)
    results = ClaimCalls(metered, ClaimFetcher(source), lock, metered.observe_refused).prepare(refs)
    assert [uid for uid, r in sorted(results.items()) if not r.ok] == ["u3", "u4"]
    metrics = Metrics()
    metered.attach_metrics(metrics)  # what was observed before the metrics existed is handed over
    assert metrics.sample("numadra_prepare_total", {"result": "error"}) == 2
    assert metrics.sample("numadra_prepare_total", {"result": "success"}) == 1
    assert metrics.sample("numadra_unprepare_total", {"result": "error"}) == 0


def test_unprepare_reads_no_claim(lock: SerializeLock) -> None:
    """Unprepare works from the driver's own state: the apiserver may have deleted the claim."""
    source = _Claims([])
    calls = ClaimCalls(FakePlugin(), ClaimFetcher(source), lock)
    assert calls.unprepare([ClaimRef("ns", "ok", "u1")]) == {"u1": ""}
    assert source.reads == 0


def test_lock_requires_open(tmp_path: Path) -> None:
    """Using the lock before open() is a clear error, not a silent no-op."""
    calls = _calls(FakePlugin(), SerializeLock(tmp_path / "l"), [ClaimRef("ns", "ok", "u1")])
    with pytest.raises(DriverCallError, match="is not open"):
        calls.prepare([ClaimRef("ns", "ok", "u1")])


class _LockProbe(FakePlugin):
    """A plugin that records, during each prepare, whether someone holds the serialize flock."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.flock_held: list[bool] = []

    def prepare_claims(self, claims: Sequence[Claim]) -> Mapping[str, PrepareResult]:
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.flock_held.append(False)
        except BlockingIOError:
            self.flock_held.append(True)
        finally:
            os.close(fd)  # also drops the probe's own flock
        return super().prepare_claims(claims)


@pytest.mark.parametrize(("serialize", "held"), [(True, True), (False, False)], ids=["held", "no-lock"])
def test_calls_hold_the_flock_when_given_one(lock: SerializeLock, serialize: bool, held: bool) -> None:
    """With a lock, the driver call runs under the flock; without (lock None) the plugin is called bare."""
    probe = _LockProbe(lock.path)
    refs = [ClaimRef("ns", "ok", "u1")]
    _calls(probe, lock if serialize else None, refs).prepare(refs)
    assert probe.flock_held == [held]


@pytest.fixture
def fanout() -> Iterator[tuple[FakePlugin, HealthFanout]]:
    fake = FakePlugin()
    fan = HealthFanout(fake, fake.handle_error, "fake.numadra.dev", resend_interval=0.2, poll=0.05)
    fan.start()
    yield fake, fan
    fan.stop()


def test_fanout_snapshot_change_resend(fanout: tuple[FakePlugin, HealthFanout]) -> None:
    """First snapshot at once, a change wakes the stream early, silence resends after the interval.

    While the change is awaited the interval is 30 s, so only the change can end that wait within
    the 10 s hang guard; then it is 0.2 s again for the resend."""
    fake, fan = fanout
    cancelled = threading.Event()
    stream = fan.stream(cancelled)
    try:
        assert len(next(stream)) == 4
        fan.resend_interval = 30
        fake.set_health("dev-1", HealthState.UNHEALTHY)
        changed = within(10, lambda: next(stream), "the change")
        assert [h.state for h in changed if h.device_name == "dev-1"] == [HealthState.UNHEALTHY]
        fan.resend_interval = 0.2
        t0 = time.monotonic()
        resent = within(10, lambda: next(stream), "the resend")
        assert time.monotonic() - t0 >= 0.15, "a resend waits for the interval"
        assert resent == changed
    finally:
        cancelled.set()
        fan.wake()


@pytest.mark.parametrize(
    "how", [pytest.param("cancel", id="client-cancel"), pytest.param("stop", id="server-stop")]
)
def test_fanout_stream_ends(fanout: tuple[FakePlugin, HealthFanout], how: str) -> None:
    """A cancelled client or a stopped fan-out ends the stream without waiting for the interval."""
    _, fan = fanout
    fan.resend_interval = 30
    cancelled = threading.Event()
    stream = fan.stream(cancelled)
    next(stream)
    timer = threading.Timer(0.05, (lambda: (cancelled.set(), fan.wake())) if how == "cancel" else fan.stop)
    timer.start()
    assert within(10, lambda: list(stream), "the stream (interval 30 s)") == []
    timer.join()


def test_fanout_survives_a_failing_source() -> None:
    """wait_for_change raising is reported through handle_error; the watcher keeps going."""
    fake = FakePlugin()

    class Flaky:
        calls = 0

        def health_snapshot(self) -> list[object]:
            return []

        def wait_for_change(self, timeout: float) -> bool:
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise OSError("udev hiccup")
            time.sleep(timeout)
            return False

    fan = HealthFanout(Flaky(), fake.handle_error, "d", poll=0.02)  # type: ignore[arg-type]
    fan.start()
    try:
        deadline = time.monotonic() + 2
        while Flaky.calls < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        fan.stop()
    assert Flaky.calls >= 3
    assert fake.errors == [("health source wait_for_change failed", "OSError('udev hiccup')")]


def test_default_resend_interval_beats_kubelet_staleness() -> None:
    """Reports repeat at least every 10 s, well inside the kubelet's default 30 s timeout."""
    assert DEFAULT_RESEND_INTERVAL <= 10
