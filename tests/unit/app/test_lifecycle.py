"""Lifecycle: parts start in order and stop in reverse, once, also after a start that failed."""

from __future__ import annotations

import pytest

from driver.lifecycle import Lifecycle, Step


class _Part:
    """A part that records its calls in a shared list; ``fail`` makes that call raise."""

    def __init__(self, name: str, calls: list[str], fail: str = "") -> None:
        self.name, self.calls, self.fail = name, calls, fail

    def start(self) -> None:
        self.calls.append(f"start {self.name}")
        if self.fail == "start":
            raise RuntimeError(f"{self.name} cannot start")

    def stop(self) -> None:
        self.calls.append(f"stop {self.name}")
        if self.fail == "stop":
            raise RuntimeError(f"{self.name} is stuck")


def _steps(calls: list[str], *names: str, fail: dict[str, str] | None = None) -> list[Step]:
    return [Step.of(n, _Part(n, calls, (fail or {}).get(n, ""))) for n in names]


def test_stop_runs_in_reverse_order_and_only_once() -> None:
    """Two stages started one after the other are stopped last-first; a second stop does nothing."""
    calls: list[str] = []
    lifecycle = Lifecycle()
    lifecycle.start(_steps(calls, "lock", "server"))
    lifecycle.start(_steps(calls, "publisher", "metrics"))
    assert lifecycle.started == ("lock", "server", "publisher", "metrics")
    lifecycle.stop()
    lifecycle.stop()
    assert calls[4:] == ["stop metrics", "stop publisher", "stop server", "stop lock"]
    assert lifecycle.started == ()


def test_a_failed_start_stops_what_had_started_and_raises() -> None:
    """The step that failed is not stopped (it undoes itself); every earlier one is, in reverse."""
    calls: list[str] = []
    lifecycle = Lifecycle()
    lifecycle.start(_steps(calls, "lock"))
    with pytest.raises(RuntimeError, match="metrics cannot start"):
        lifecycle.start(_steps(calls, "publisher", "metrics", "never", fail={"metrics": "start"}))
    assert calls == ["start lock", "start publisher", "start metrics", "stop publisher", "stop lock"]
    lifecycle.stop()
    assert calls[-1] == "stop lock"  # nothing stopped twice


def test_a_stop_that_fails_does_not_keep_the_others_running() -> None:
    """One stuck part is logged; the parts started before it are still stopped."""
    calls: list[str] = []
    lifecycle = Lifecycle()
    lifecycle.start(_steps(calls, "sockets", "stuck", "last", fail={"stuck": "stop"}))
    lifecycle.stop()
    assert calls[3:] == ["stop last", "stop stuck", "stop sockets"]
