"""The metered plugin: one observation per claim of a call, and a change notice after each call."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from driver.observability import Metrics
from driver.observability.metered import MeteredPlugin
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
