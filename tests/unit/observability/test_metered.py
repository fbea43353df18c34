"""The metered plugin: one observation per claim of a call, and a change notice after each call."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from prometheus_client import generate_latest

from driver.observability import Metrics, Result
from driver.observability.metered import MAX_PENDING_OBSERVATIONS, MeteredPlugin
from driver.plugin import Claim, ClaimRef
from tests.support.fakeplugin import FakePlugin


@pytest.mark.parametrize(
    ("names", "successes", "errors"),
    [
        pytest.param(("ok-1", "ok-2"), 2, 0, id="all-ok"),
        pytest.param(("ok-1", "fail-2"), 1, 1, id="one-bad"),
    ],
)
def test_metered_plugin_counts_each_claim(names: tuple[str, ...], successes: int, errors: int) -> None:
    """Every claim of a call is one observation with the call's result; the change hook fires."""
    changes: list[int] = []
    plugin = MeteredPlugin(FakePlugin(), lambda: changes.append(1))
    metrics = Metrics()
    plugin.attach_metrics(metrics)
    refs = [ClaimRef("ns", name, f"uid-{name}") for name in names]
    results = plugin.prepare_claims([Claim(ref, {}) for ref in refs])
    assert set(results) == {r.uid for r in refs}
    assert metrics.sample("numadra_prepare_total", {"result": "success"}) == successes
    assert metrics.sample("numadra_prepare_total", {"result": "error"}) == errors
    for result, claims in (("success", successes), ("error", errors)):
        count = metrics.sample("numadra_prepare_duration_seconds_count", {"result": result})
        assert (count or 0) == claims  # a result never observed has no series yet
    plugin.unprepare_claims(refs)
    assert metrics.sample("numadra_unprepare_total", {"result": "success"}) == successes
    assert metrics.sample("numadra_unprepare_total", {"result": "error"}) == errors
    assert len(changes) == 2


def test_metered_plugin_counts_errors_when_the_call_raises() -> None:
    """An infrastructure failure (raise) counts every claim as an error and still notes the change."""
    changes: list[int] = []
    plugin = MeteredPlugin(FakePlugin(), lambda: changes.append(1))
    metrics = Metrics()
    plugin.attach_metrics(metrics)
    with pytest.raises(RuntimeError):
        plugin.prepare_claims(
            [Claim(ClaimRef("ns", "raise-1", "u1"), {}), Claim(ClaimRef("ns", "ok", "u2"), {})]
        )
    assert metrics.sample("numadra_prepare_total", {"result": "error"}) == 2
    assert changes == [1]


def test_metered_plugin_hands_over_calls_made_before_the_metrics_existed() -> None:
    """The kubelet may prepare before prometheus is loaded: those claims are counted on attach."""
    plugin = MeteredPlugin(FakePlugin(), lambda: None)
    plugin.prepare_claims(
        [Claim(ClaimRef("ns", "ok-1", "u1"), {}), Claim(ClaimRef("ns", "fail-2", "u2"), {})]
    )
    plugin.unprepare_claims([ClaimRef("ns", "ok-1", "u1")])
    metrics = Metrics()
    plugin.attach_metrics(metrics)
    plugin.prepare_claims([Claim(ClaimRef("ns", "ok-3", "u3"), {})])
    assert metrics.sample("numadra_prepare_total", {"result": "success"}) == 2
    assert metrics.sample("numadra_prepare_total", {"result": "error"}) == 1
    assert metrics.sample("numadra_unprepare_total", {"result": "success"}) == 1
    assert metrics.sample("numadra_prepare_duration_seconds_count", {"result": "success"}) == 2


class _ReadsAhead(FakePlugin):
    """The fake plugin, noting the claims it was told to read ahead for."""

    def __init__(self) -> None:
        super().__init__()
        self.ahead: list[tuple[str, ...]] = []

    def read_ahead(self, claims: Sequence[Claim]) -> None:
        self.ahead.append(tuple(c.ref.uid for c in claims))


def test_metered_plugin_passes_the_read_ahead_on_only_to_a_plugin_with_one() -> None:
    """The kubelet layer sees the wrapper: it must forward read_ahead, and do nothing without one."""
    claims = [Claim(ClaimRef("ns", "c", "ok-1"), {})]
    inner = _ReadsAhead()
    MeteredPlugin(inner, lambda: None).read_ahead(claims)
    assert inner.ahead == [("ok-1",)]
    plain = FakePlugin()
    MeteredPlugin(plain, lambda: None).read_ahead(claims)  # no read_ahead to call: nothing happens
    assert plain.calls == []


class _CountedMetrics(Metrics):
    """Metrics that note each prepare observation as it reaches them."""

    def __init__(self) -> None:
        super().__init__()
        self.observed: list[tuple[str, int]] = []

    def observe_prepare(self, result: Result, seconds: float, claims: int = 1) -> None:
        self.observed.append((result, claims))
        super().observe_prepare(result, seconds, claims)


def _prepare_ok(plugin: MeteredPlugin, n: int) -> None:
    for i in range(n):
        plugin.prepare_claims([Claim(ClaimRef("ns", f"ok-{i}", f"u{i}"), {})])


def test_a_call_queues_its_observation_and_every_read_applies_it_first() -> None:
    """The kubelet's call does not wait for the prometheus update: the observation reaches the
    metrics at the next read (a scrape's ``generate_latest`` here), complete and once."""
    metrics = _CountedMetrics()
    plugin = MeteredPlugin(FakePlugin(), lambda: None)
    plugin.attach_metrics(metrics)
    _prepare_ok(plugin, 3)
    plugin.observe_refused(2, 0.01)
    assert metrics.observed == []  # queued, not applied on the call's path
    text = generate_latest(metrics.registry).decode()
    assert 'numadra_prepare_total{result="success"} 3.0' in text
    assert 'numadra_prepare_total{result="error"} 2.0' in text
    assert metrics.observed == [("success", 1)] * 3 + [("error", 2)]
    assert metrics.sample("numadra_prepare_total", {"result": "success"}) == 3  # not applied twice


def test_the_housekeeping_round_applies_the_queue_and_a_full_queue_applies_itself() -> None:
    """Without any read, ``apply_pending`` (the round after the calls) hands the queue over, and a
    call that finds the bound queued applies it, so the queue never grows without bound."""
    metrics = _CountedMetrics()
    plugin = MeteredPlugin(FakePlugin(), lambda: None)
    plugin.attach_metrics(metrics)
    _prepare_ok(plugin, 2)
    metrics.apply_pending()
    assert len(metrics.observed) == 2
    _prepare_ok(plugin, MAX_PENDING_OBSERVATIONS - 1)
    assert len(metrics.observed) == 2
    _prepare_ok(plugin, 1)
    assert len(metrics.observed) == 2 + MAX_PENDING_OBSERVATIONS


def test_a_read_racing_the_calls_never_sees_less_than_the_calls_that_ended() -> None:
    """Calls on several threads and reads on another: each read counts at least every call that
    had returned when it began, and the last read counts all of them."""
    metrics = Metrics()
    plugin = MeteredPlugin(FakePlugin(), lambda: None)
    plugin.attach_metrics(metrics)
    ended = [0]
    ended_lock = threading.Lock()
    stop = threading.Event()
    short: list[tuple[float, int]] = []

    def call(n: int) -> None:
        for i in range(300):
            plugin.prepare_claims([Claim(ClaimRef("ns", f"ok-{n}-{i}", f"u{n}-{i}"), {})])
            with ended_lock:
                ended[0] += 1

    def read() -> None:
        while not stop.is_set():
            with ended_lock:
                before = ended[0]
            seen = metrics.sample("numadra_prepare_total", {"result": "success"}) or 0.0
            if seen < before:
                short.append((seen, before))

    reader = threading.Thread(target=read)
    callers = [threading.Thread(target=call, args=(n,)) for n in range(3)]
    reader.start()
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    stop.set()
    reader.join()
    assert short == []
    assert metrics.sample("numadra_prepare_total", {"result": "success"}) == 900
