"""Taints from health snapshots: label-value sanitizing, effects, and the publisher feed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from driver.health.taints import TAINT_KEY, HealthTaints, sanitize_label_value, taints_for
from driver.plugin import DeviceHealth, HealthState

SICK = DeviceHealth("n1", "nic-0", HealthState.UNHEALTHY, "NoCarrier")
WELL = DeviceHealth("n1", "gpu-0", HealthState.HEALTHY)
UNSURE = DeviceHealth("n1", "gpu-1", HealthState.UNKNOWN, "AdminDown")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("NoCarrier", "NoCarrier", id="plain"),
        pytest.param("link down: eth0 (carrier=0)", "link-down-eth0-carrier-0", id="spaces-and-punctuation"),
        pytest.param("-._x_.-", "x", id="edges"),
        pytest.param("a" * 80, "a" * 63, id="too-long"),
        pytest.param("a" * 62 + "-b", "a" * 62, id="cut-leaves-dash"),
        pytest.param("ünïcode", "n-code", id="non-ascii"),
        pytest.param("!!!", "", id="nothing-left"),
    ],
)
def test_sanitize_label_value(text: str, expected: str) -> None:
    """Any reason becomes a valid label value (<= 63, [A-Za-z0-9._-], alphanumeric ends)."""
    assert sanitize_label_value(text) == expected


def test_only_unhealthy_devices_are_tainted() -> None:
    """Unhealthy gets the taint with the reason as value; Healthy and Unknown get none."""
    assert taints_for([SICK, WELL, UNSURE], "NoExecute") == {
        "nic-0": [{"key": TAINT_KEY, "value": "NoCarrier", "effect": "NoExecute"}]
    }


def test_effect_none_disables_taints() -> None:
    """--taint-unhealthy=none publishes no taints at all."""
    assert taints_for([SICK], "none") == {}


class Sink:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def set_taints(self, taints: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        self.calls.append(dict(taints))


def test_feed_passes_changes_only_and_counts_transitions() -> None:
    """The listener calls the sink only when taints change and counts adds and removals."""
    sink = Sink()
    feed = HealthTaints(sink)
    feed([SICK, WELL])
    feed([SICK, WELL])
    feed([WELL])
    assert [sorted(c) for c in sink.calls] == [["nic-0"], []]
    assert feed.transitions == {"added": 1, "removed": 1}


def test_unknown_effect_is_rejected() -> None:
    """PreferNoSchedule is not a device taint effect."""
    with pytest.raises(ValueError, match="NoSchedule"):
        HealthTaints(Sink(), "PreferNoSchedule")  # type: ignore[arg-type]
