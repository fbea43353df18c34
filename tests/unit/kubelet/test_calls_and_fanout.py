"""ClaimCalls and HealthFanout without sockets: the cores the gRPC servicers delegate to."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from driver.kubelet.dra import ClaimCalls, DriverCallError
from driver.kubelet.health import DEFAULT_RESEND_INTERVAL, HealthFanout
from driver.kubelet.serialize import SerializeLock
from driver.plugin import ClaimRef, HealthState, PrepareResult
from tests.support.fakeplugin import FakePlugin


@pytest.fixture
def lock(tmp_path: Path) -> Iterator[SerializeLock]:
    lk = SerializeLock(tmp_path / "serialize.lock")
    lk.open()
    yield lk
    lk.close()


def test_prepare_answers_every_uid(lock: SerializeLock) -> None:
    """Good, failed, forgotten and malformed claims each get exactly one result."""
    fake = FakePlugin()
    claims = [
        ClaimRef("ns", "ok", "u1"),
        ClaimRef("ns", "fail-x", "u2"),
        ClaimRef("ns", "forget-x", "u3"),
        ClaimRef("ns", "Bad_Name", "u4"),
    ]
    results = ClaimCalls(fake, lock).prepare(claims)
    assert sorted(results) == ["u1", "u2", "u3", "u4"]
    assert results["u1"].ok
    assert [r.ok for uid, r in sorted(results.items())] == [True, False, False, False]
    assert fake.calls == [("prepare", ("u1", "u2", "u3"))]


def test_driver_exception_becomes_driver_call_error(lock: SerializeLock) -> None:
    """A raising driver surfaces as DriverCallError with type and text, and releases the lock."""
    calls = ClaimCalls(FakePlugin(), lock)
    with pytest.raises(DriverCallError, match="RuntimeError: fake driver exploded"):
        calls.unprepare([ClaimRef("ns", "raise-x", "u1")])
    assert calls.unprepare([ClaimRef("ns", "ok", "u1")]) == {"u1": ""}


def test_lock_requires_open(tmp_path: Path) -> None:
    """Using the lock before open() is a clear error, not a silent no-op."""
    calls = ClaimCalls(FakePlugin(), SerializeLock(tmp_path / "l"))
    with pytest.raises(DriverCallError, match="is not open"):
        calls.prepare([ClaimRef("ns", "ok", "u1")])


class _LockProbe(FakePlugin):
    """A plugin that records, during each prepare, whether someone holds the serialize flock."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.flock_held: list[bool] = []

    def prepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.flock_held.append(False)
        except BlockingIOError:
            self.flock_held.append(True)
        finally:
            os.close(fd)  # also drops the probe's own flock
        return super().prepare_claims(claims)


@pytest.mark.parametrize(("serialize", "held"), [(True, True), (False, False)], ids=["held", "plugin-own"])
def test_calls_hold_the_flock_unless_the_plugin_serializes_itself(
    lock: SerializeLock, serialize: bool, held: bool
) -> None:
    """With a lock, the driver call runs under the flock; without (lock None) the plugin is called bare."""
    probe = _LockProbe(lock.path)
    ClaimCalls(probe, lock if serialize else None).prepare([ClaimRef("ns", "ok", "u1")])
    assert probe.flock_held == [held]


@pytest.fixture
def fanout() -> Iterator[tuple[FakePlugin, HealthFanout]]:
    fake = FakePlugin()
    fan = HealthFanout(fake, fake.handle_error, "fake.numadra.dev", resend_interval=0.2, poll=0.05)
    fan.start()
    yield fake, fan
    fan.stop()


def test_fanout_snapshot_change_resend(fanout: tuple[FakePlugin, HealthFanout]) -> None:
    """First snapshot at once, a change wakes the stream early, silence resends after the interval."""
    fake, fan = fanout
    stream = fan.stream(threading.Event())
    assert len(next(stream)) == 4
    t0 = time.monotonic()
    fake.set_health("dev-1", HealthState.UNHEALTHY)
    changed = next(stream)
    assert time.monotonic() - t0 < 0.15
    assert [h.state for h in changed if h.device_name == "dev-1"] == [HealthState.UNHEALTHY]
    t0 = time.monotonic()
    next(stream)
    assert time.monotonic() - t0 >= 0.15


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
    t0 = time.monotonic()
    assert list(stream) == []
    assert time.monotonic() - t0 < 2
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
